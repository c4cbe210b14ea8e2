// Validates rendered Kubernetes manifests (`tandem k8s render` output) against the Kubernetes API
// schemas of the npm package kubernetes-models (tests/tools, installed by scripts/test-setup.sh),
// plus the cross-object rules the API server or the controllers enforce and a schema does not:
// a workload's selector matches its pod template's labels, Services and PodDisruptionBudgets
// select some workload's pods, probes name a declared container port, StatefulSets name an
// existing Service. kubernetes-models does not reject unknown fields (its schemas allow extra
// properties), so those are left to review of the golden files.
//
//   node tests/k8s/validate_manifests.mjs FILE.yaml...     (NODE_PATH=tests/tools/node_modules)
// Exit 0 when every document of every file is valid, 1 otherwise (each error printed).
import { readFileSync } from "node:fs";
import path from "node:path";

// The packages live in tests/tools/node_modules; their files are imported by path (NODE_PATH does
// not apply to ESM imports, and kubernetes-models' exports map offers only "import" conditions).
import { pathToFileURL } from "node:url";
const toolsDir = process.env.TANDEM_TOOLS_DIR ??
  path.resolve(path.dirname(new URL(import.meta.url).pathname), "../tools");
const load = async (file) => import(pathToFileURL(path.join(toolsDir, "node_modules", file)).href);

const YAML = await load("yaml/dist/index.js");
const apps = await load("kubernetes-models/apps/v1/index.js");
const core = await load("kubernetes-models/v1/index.js");
const policy = await load("kubernetes-models/policy/v1/index.js");
const autoscaling = await load("kubernetes-models/autoscaling/v1/index.js");
const rbac = await load("kubernetes-models/rbac.authorization.k8s.io/v1/index.js");

const kinds = {
  "apps/v1/Deployment": apps.Deployment,
  "apps/v1/StatefulSet": apps.StatefulSet,
  "v1/Service": core.Service,
  "v1/PersistentVolumeClaim": core.PersistentVolumeClaim,
  "v1/ConfigMap": core.ConfigMap,
  "v1/Secret": core.Secret,
  "policy/v1/PodDisruptionBudget": policy.PodDisruptionBudget,
  "v1/ServiceAccount": core.ServiceAccount,
  "rbac.authorization.k8s.io/v1/Role": rbac.Role,
  "rbac.authorization.k8s.io/v1/RoleBinding": rbac.RoleBinding,
  // the planner's request bodies to the scale subresource (deploy/k8s/k8s_connector.h)
  "autoscaling/v1/Scale": autoscaling.Scale,
};

const dnsLabel = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const matches = (selector, labels) =>
  Object.entries(selector ?? {}).every(([k, v]) => labels?.[k] === v);

let failures = 0;
const fail = (where, what) => {
  failures++;
  console.error(`${where}: ${what}`);
};

for (const file of process.argv.slice(2)) {
  const docs = YAML.parseAllDocuments(readFileSync(file, "utf8"));
  const objects = [];
  docs.forEach((doc, i) => {
    const where = `${file} document ${i + 1}`;
    if (doc.errors.length) return fail(where, `bad YAML: ${doc.errors.map(String).join("; ")}`);
    const obj = doc.toJS();
    if (obj === null) return;
    const key = `${obj.apiVersion}/${obj.kind}`;
    const Model = kinds[key];
    if (!Model) return fail(where, `no kubernetes-models class for ${key}`);
    const name = obj.metadata?.name;
    try {
      new Model(obj).validate();
    } catch (e) {
      return fail(`${where} (${obj.kind} ${name})`, e.message);
    }
    if (!dnsLabel.test(name ?? "") || name.length > 63) fail(where, `name '${name}' is not a DNS-1123 label`);
    objects.push({ where: `${where} (${obj.kind} ${name})`, obj });
  });

  const workloads = objects.filter(({ obj }) => obj.kind === "Deployment" || obj.kind === "StatefulSet");
  const podLabels = workloads.map(({ obj }) => obj.spec.template.metadata?.labels ?? {});
  const names = new Set(objects.map(({ obj }) => `${obj.kind}/${obj.metadata.name}`));
  if (names.size !== objects.length) fail(file, "two objects of one kind share a name");
  for (const { where, obj } of workloads) {
    const spec = obj.spec;
    if (!matches(spec.selector.matchLabels, spec.template.metadata?.labels)) {
      fail(where, "spec.selector does not match the pod template's labels");
    }
    if (obj.kind === "StatefulSet" && !names.has(`Service/${spec.serviceName}`)) {
      fail(where, `serviceName '${spec.serviceName}' is not a Service in this file`);
    }
    for (const c of spec.template.spec.containers) {
      const ports = new Set((c.ports ?? []).map((p) => p.name));
      for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) {
        const port = c[probe]?.httpGet?.port ?? c[probe]?.tcpSocket?.port;
        if (typeof port === "string" && !ports.has(port)) {
          fail(where, `${c.name}.${probe} names port '${port}', which the container does not declare`);
        }
      }
      const mounts = (c.volumeMounts ?? []).map((m) => m.name);
      const volumes = new Set((spec.template.spec.volumes ?? []).map((v) => v.name));
      for (const m of mounts) if (!volumes.has(m)) fail(where, `${c.name} mounts unknown volume '${m}'`);
    }
  }
  for (const { where, obj } of objects) {
    const selector = obj.kind === "Service" ? obj.spec.selector
      : obj.kind === "PodDisruptionBudget" ? obj.spec.selector?.matchLabels : null;
    if (selector && !podLabels.some((labels) => matches(selector, labels))) {
      fail(where, "its selector matches no pod template in this file");
    }
    if (obj.kind === "Service") {
      for (const p of obj.spec.ports) {
        if (typeof p.targetPort !== "string") continue;
        const target = workloads.find(({ obj: w }) => matches(selector, w.spec.template.metadata?.labels));
        const declared = target?.obj.spec.template.spec.containers.flatMap((c) => (c.ports ?? []).map((q) => q.name));
        if (target && !declared.includes(p.targetPort)) fail(where, `targetPort '${p.targetPort}' is not a port of its pods`);
      }
    }
  }
  console.log(`${file}: ${docs.length} documents${failures ? "" : ", valid"}`);
}
process.exit(failures ? 1 : 0);
