// k8s_validate.mjs — validates Kubernetes objects against the API schemas
// with the npm package kubernetes-models (and @kubernetes-models/
// prometheus-operator for ServiceMonitor). Usage: node k8s_validate.mjs
// FILE.yaml... — every document of every file (a kustomization.yaml: its
// resources must exist, and the names its images / replicas / patches name
// must be those of the objects it gathers); prints "ok"/"FAIL" per object and
// exits 1 if any failed. Also checks that a deliberately broken object
// (a port given as a list) is rejected: the validator must be able to fail.
import { existsSync, readFileSync, writeFileSync } from "fs";
import { dirname, join } from "path";
import { parseAllDocuments } from "yaml";

async function modelOf(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  if (group === "monitoring.coreos.com")
    return (await import(`@kubernetes-models/prometheus-operator/${apiVersion}/${kind}`))[kind];
  return (await import(`kubernetes-models/${group ? group + "/" : ""}${version}/${kind}`))[kind];
}

async function validate(obj) {
  const Model = await modelOf(obj.apiVersion, obj.kind);
  new Model(obj).validate();
}

// The objects a kustomization gathers (its resources, recursively).
function gathered(kfile) {
  const k = parseAllDocuments(readFileSync(kfile, "utf8"))[0].toJS();
  const out = [];
  for (const r of k.resources || []) {
    const p = join(dirname(kfile), r);
    if (!existsSync(p)) throw new Error(`resource ${r} does not exist`);
    if (existsSync(join(p, "kustomization.yaml"))) out.push(...gathered(join(p, "kustomization.yaml")));
    else for (const d of parseAllDocuments(readFileSync(p, "utf8"))) if (d.toJS()) out.push(d.toJS());
  }
  return out;
}

function checkKustomization(file) {
  const k = parseAllDocuments(readFileSync(file, "utf8"))[0].toJS();
  if (k.kind !== "Kustomization") throw new Error("not a Kustomization");
  const objs = gathered(file);
  const names = new Set(objs.map((o) => o.metadata.name));
  const images = new Set(objs.flatMap((o) => ((o.spec && o.spec.template && o.spec.template.spec.containers) || [])
    .map((c) => c.image.split(":")[0])));
  for (const r of k.replicas || []) if (!names.has(r.name)) throw new Error(`replicas: no object ${r.name}`);
  for (const i of k.images || []) if (!images.has(i.name)) throw new Error(`images: no container uses ${i.name}`);
  for (const g of k.secretGenerator || []) for (const f of g.files || []) {
    const path = f.includes("=") ? f.split("=")[1] : f;
    if (!/^[\w./-]+$/.test(path)) throw new Error(`secretGenerator ${g.name}: odd file ${f}`);
  }
  return objs.length;
}

// SPECD_ARGS_OUT=FILE: "BINARY --option" for every option a container passes.
const argLines = [];
function noteArgs(obj) {
  const spec = obj.spec && obj.spec.template && obj.spec.template.spec;
  for (const c of (spec && spec.containers) || []) {
    const bin = (c.command || [])[0];
    for (const a of c.args || []) if (bin && a.startsWith("--")) argLines.push(`${bin.split("/").pop()} ${a}`);
  }
}

let fails = 0;
for (const file of process.argv.slice(2)) {
  if (file.endsWith("kustomization.yaml")) {
    try {
      console.log(`ok   - ${file}: gathers ${checkKustomization(file)} objects; its references resolve`);
    } catch (e) {
      fails++;
      console.log(`FAIL - ${file}: ${e.message}`);
    }
    continue;
  }
  for (const doc of parseAllDocuments(readFileSync(file, "utf8"))) {
    const obj = doc.toJS();
    if (!obj) continue;
    const what = `${file}: ${obj.kind} ${obj.metadata && obj.metadata.name}`;
    noteArgs(obj);
    try {
      await validate(obj);
      console.log(`ok   - ${what}`);
    } catch (e) {
      fails++;
      console.log(`FAIL - ${what}: ${e.message.split("\n").slice(0, 3).join(" ")}`);
    }
  }
}
try {
  await validate({ apiVersion: "v1", kind: "Service", metadata: { name: "x" }, spec: { ports: [{ port: [80] }] } });
  fails++;
  console.log("FAIL - a broken Service was accepted: the validator checks nothing");
} catch (e) {
  console.log("ok   - a broken Service is rejected");
}
if (process.env.SPECD_ARGS_OUT) writeFileSync(process.env.SPECD_ARGS_OUT, argLines.join("\n") + "\n");
process.exit(fails ? 1 : 0);
