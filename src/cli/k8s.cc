// tandem k8s render GRAPH.yaml [--namespace NS] [--image IMAGE] [-o FILE]: the deployment graph as
// Kubernetes manifests (deploy/k8s/render.h; the graph's `kubernetes:` keys:
// deploy/k8s/settings.h). Writes to stdout, or to FILE. Exit codes: 0 rendered, 1 a bad graph or an unwritable FILE, 2 usage.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "deploy/k8s/render.h"

namespace tandem::cli {
namespace {

struct K8sRenderOptions {
  std::string graph;
  std::string output;
  k8s::RenderOptions render;
};

int RunK8sRender(const K8sRenderOptions& opt) {
  auto rendered = k8s::RenderGraphFile(opt.graph, opt.render);
  if (!rendered.ok()) {
    std::fprintf(stderr, "tandem k8s render: %s\n", rendered.status().message().c_str());
    return 1;
  }
  if (opt.output.empty() || opt.output == "-") {
    std::fwrite(rendered->data(), 1, rendered->size(), stdout);
    return std::fflush(stdout) == 0 ? 0 : 1;
  }
  std::ofstream out(opt.output, std::ios::binary | std::ios::trunc);
  out << *rendered;
  out.close();
  if (!out) {
    std::fprintf(stderr, "tandem k8s render: cannot write %s\n", opt.output.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

Runner RegisterK8s(CLI::App& app) {
  app.require_subcommand(1);
  CLI::App* render = app.add_subcommand(
      "render", "Render a deployment graph as Kubernetes manifests (Deployments, Services, ...)");
  auto opt = std::make_shared<K8sRenderOptions>();
  render->add_option("graph", opt->graph, "The graph file (as for tandem serve)")
      ->required()
      ->check(CLI::ExistingFile);
  render->add_option("--namespace", opt->render.namespace_name,
                     "Kubernetes namespace written in the objects (overrides kubernetes.namespace)");
  render->add_option("--image", opt->render.image,
                     "Container image of tandem (overrides kubernetes.image; default tandem:latest)");
  render->add_option("-o,--output", opt->output, "Write here instead of stdout");
  return [opt, render] { return render->parsed() ? RunK8sRender(*opt) : 2; };
}

}  // namespace tandem::cli
