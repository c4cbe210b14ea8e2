// Validates structured outputs against their schemas with ajv (draft 2020-12, or draft-07 where
// the schema's $schema says so) and ajv-formats (full mode: date, time, date-time, email, uuid,
// ipv4 ...). The other oracle beside validate_json.py.
//
//   node validate_ajv.mjs SCHEMAS.json OUTPUTS.jsonl
//
// Prints each invalid output and a summary; exit 1 when any is invalid.
import { readFileSync } from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";
import Ajv from "ajv";
import addFormats from "ajv-formats";

const suite = new Map(JSON.parse(readFileSync(process.argv[2], "utf8")).map((c) => [c.name, c.schema]));
const make = (Cls) => {
  const ajv = new Cls({ strict: false, allErrors: false, validateFormats: true });
  addFormats(ajv, { mode: "full" });
  return ajv;
};
const ajv2020 = make(Ajv2020.default ?? Ajv2020);
const ajv7 = make(Ajv.default ?? Ajv);
const compiled = new Map();
let total = 0;
let bad = 0;
for (const line of readFileSync(process.argv[3], "utf8").split("\n")) {
  if (!line) continue;
  const rec = JSON.parse(line);
  const schema = suite.get(rec.name);
  if (!compiled.has(rec.name)) {
    const draft7 = typeof schema === "object" && String(schema.$schema ?? "").includes("draft-07");
    compiled.set(rec.name, (draft7 ? ajv7 : ajv2020).compile(schema));
  }
  total++;
  let value;
  try {
    value = JSON.parse(rec.output);
  } catch (e) {
    bad++;
    console.log(`${rec.name}: not JSON (${e.message}): ${JSON.stringify(rec.output)}`);
    continue;
  }
  const validate = compiled.get(rec.name);
  if (!validate(value)) {
    bad++;
    console.log(`${rec.name}: ${ajv2020.errorsText(validate.errors)}: ${JSON.stringify(rec.output)}`);
  }
}
console.log(`ajv: ${total} outputs of ${compiled.size} schemas, ${bad} invalid`);
process.exit(bad ? 1 : 0);
