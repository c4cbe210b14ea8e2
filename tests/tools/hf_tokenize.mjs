// Differential oracle: Hugging Face's JavaScript tokenizers port (@huggingface/tokenizers).
// Usage: node hf_tokenize.mjs <model_dir> <input.json>
//   input.json: {"encode": [{"text": "...", "parse_special": true}, ...],
//                "decode": [{"ids": [...], "skip_special_tokens": false}, ...]}
// Prints {"encode": [[ids...], ...], "decode": ["text", ...]} on stdout.
//
// The JS port has no counterpart of parse_special=false (Rust's encode_special_tokens /
// transformers' split_special_tokens): it always splits on every added token, and its
// add_special_tokens option only controls the post-processor. parse_special=false is emulated by a
// second tokenizer whose added_tokens list lacks the special tokens, so their text is ordinary text
// while non-special added tokens still match (what the Rust library does).
import { readFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const [modelDir, inputPath] = process.argv.slice(2);
const tokenizerJson = JSON.parse(readFileSync(`${modelDir}/tokenizer.json`, "utf8"));
let config = {};
try {
  config = JSON.parse(readFileSync(`${modelDir}/tokenizer_config.json`, "utf8"));
} catch {}
const input = JSON.parse(readFileSync(inputPath, "utf8"));

const withSpecial = new Tokenizer(tokenizerJson, config);
let withoutSpecial = null;
const plain = () => {
  if (withoutSpecial === null) {
    const json = structuredClone(tokenizerJson);
    json.added_tokens = json.added_tokens.filter((t) => !t.special);
    withoutSpecial = new Tokenizer(json, config);
  }
  return withoutSpecial;
};

const out = { encode: [], decode: [] };
for (const item of input.encode ?? []) {
  const tok = item.parse_special ? withSpecial : plain();
  out.encode.push(tok.encode(item.text, { add_special_tokens: false }).ids);
}
for (const item of input.decode ?? []) {
  out.decode.push(
    item.ids.length === 0
      ? ""
      : withSpecial.decode(item.ids, {
          skip_special_tokens: !!item.skip_special_tokens,
          clean_up_tokenization_spaces: false,
        }),
  );
}
process.stdout.write(JSON.stringify(out));
