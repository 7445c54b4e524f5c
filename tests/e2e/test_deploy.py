"""The deployment files (Dockerfile, deploy/k8s, deploy/kserve; docs/deploy.md) parse and
reference what sluice has: every flag is a flag of `sluice serve`, ports agree, the probe and
scrape paths answer on a server started with the manifests' own arguments, and the metrics
the autoscaler and the Prometheus adapter use are among the ones it exports."""
import json
import os
import re
import subprocess

import yaml

import harness
from harness import Server

harness.parse_args()
c = harness.Checker()
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODELS = os.path.join(ROOT, "models")


def load(path):
    with open(os.path.join(ROOT, path)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


help_text = subprocess.run([harness.ARGS.sluice, "serve", "--help"], capture_output=True,
                           text=True).stdout
FLAGS = set(re.findall(r"(--[a-z][a-z0-9-]*)", help_text))
c.check("--model-repository" in FLAGS and "--port" in FLAGS, f"serve --help flags: {FLAGS}")


def check_flags(args, what):
    for a in args:
        if a.startswith("--"):
            c.check(a in FLAGS, f"{what}: {a} is not a flag of sluice serve")


def arg_value(args, flag):
    return args[args.index(flag) + 1] if flag in args else None


# --- Dockerfile ---
with open(os.path.join(ROOT, "Dockerfile")) as f:
    docker = f.read()
stages = re.findall(r"^FROM\s+(\S+)\s+AS\s+(\S+)", docker, re.M)
names = [s[1] for s in stages]
c.check({"build-cpu", "build-cuda", "cpu", "cuda"} <= set(names), f"stages {names}")
c.check(all(base.startswith("debian:bookworm") or base in names for base, _ in stages),
        f"Debian bookworm bases: {stages}")
entry = json.loads(re.search(r"^ENTRYPOINT\s+(\[.*\])", docker, re.M).group(1))
cmd = json.loads(re.search(r"^CMD\s+(\[.*\])", docker, re.M).group(1))
expose = int(re.search(r"^EXPOSE\s+(\d+)", docker, re.M).group(1))
c.check(entry[:2] == ["sluice", "serve"], f"entrypoint {entry}")
check_flags(entry + cmd, "Dockerfile")
c.check(int(arg_value(entry, "--port")) == expose, f"EXPOSE {expose} vs entrypoint {entry}")
exposed_ports = [int(x) for x in re.search(r"^EXPOSE\s+([\d ]+)$", docker, re.M).group(1).split()]
c.check(int(arg_value(entry, "--grpc-port")) in exposed_ports,
        f"EXPOSE {exposed_ports} vs the entrypoint's --grpc-port {entry}")
for src in re.findall(r"^COPY\s+(?!--from)(\S+)\s", docker, re.M):
    c.check(os.path.exists(os.path.join(ROOT, src)), f"COPY {src}: not in the repository")
c.check("scripts/setup" in docker, "build stages install with scripts/setup")

# --- Kubernetes ---
k8s = load("deploy/k8s/sluice.yaml")
kinds = {d["kind"]: d for d in k8s}
c.check(set(kinds) == {"Deployment", "Service", "HorizontalPodAutoscaler"}, f"kinds {kinds}")
dep = kinds["Deployment"]
pod = dep["spec"]["template"]
ctr = pod["spec"]["containers"][0]
dep_args = ctr["args"]
check_flags(dep_args, "Deployment")
ports = {p["name"]: p["containerPort"] for p in ctr["ports"]}
c.check(ports.get("http") == expose, f"containerPort {ports} vs EXPOSE {expose}")
c.check(ports.get("grpc") == int(arg_value(entry, "--grpc-port")),
        f"containerPort grpc {ports} vs the entrypoint's --grpc-port")
c.check(pod["metadata"]["annotations"]["prometheus.io/port"] == str(expose), "scrape port")
c.check(dep["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items(),
        "selector matches the pod")
svc = kinds["Service"]
c.check(svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items(), "service selector")
c.check(all(p["targetPort"] in ports for p in svc["spec"]["ports"]), "service targetPort")
for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
    c.check(ctr[probe]["httpGet"]["port"] in ports, f"{probe} port")
c.check(int(arg_value(dep_args, "--shutdown-timeout")) < pod["spec"]["terminationGracePeriodSeconds"],
        "grace period covers the drain")
hpa = kinds["HorizontalPodAutoscaler"]
c.check(hpa["spec"]["scaleTargetRef"]["name"] == dep["metadata"]["name"], "HPA target")
hpa_metrics = [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]]
adapter = load("deploy/k8s/prometheus-adapter.yaml")[0]
adapter_metrics = [re.match(r"(\w+)", r["seriesQuery"]).group(1)
                   for r in adapter["rules"]["custom"]]
exposed = [r["name"]["as"] for r in adapter["rules"]["custom"]]
c.check(all(m in exposed for m in hpa_metrics), f"HPA metrics {hpa_metrics} from the adapter")

# --- KServe ---
isvc = load("deploy/kserve/inferenceservice.yaml")[0]
c.check(isvc["kind"] == "InferenceService" and
        isvc["apiVersion"].startswith("serving.kserve.io/"), "InferenceService")
kc = isvc["spec"]["predictor"]["containers"][0]
c.check(kc["command"] == ["sluice", "serve"], f"command {kc['command']}")
check_flags(kc["args"], "InferenceService")
kport = int(arg_value(kc["args"], "--port"))
c.check(kc["ports"][0]["containerPort"] == kport, "KServe port agrees with --port")
for probe in ("readinessProbe", "livenessProbe"):
    c.check(kc[probe]["httpGet"]["port"] == kport, f"KServe {probe} port")


def serve_like(args, where):
    """Starts sluice with a manifest's arguments: the model volume is the repository's
    models/, the port a free one."""
    out = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("--port", "--host", "--grpc-port"):
            i += 2
            continue
        if a in ("/models", "/mnt/models"):
            a = MODELS
        out.append(a)
        i += 1
    return Server(None, *out)


probe_paths = {ctr[p]["httpGet"]["path"] for p in ("startupProbe", "readinessProbe",
                                                    "livenessProbe")}
with serve_like(dep_args, "Deployment") as s:
    for path in sorted(probe_paths):
        st, _, _ = s.get(path)
        c.check(st == 200, f"Deployment probe {path}: {st}")
    st, _, text = s.get(pod["metadata"]["annotations"]["prometheus.io/path"])
    c.check(st == 200, f"scrape path {st}")
    for m in adapter_metrics + hpa_metrics:
        c.check(re.search(r"^" + m + r"\{", text, re.M) is not None, f"metric {m} exported")
with serve_like(kc["args"], "InferenceService") as s:
    for p in ("readinessProbe", "livenessProbe"):
        st, _, _ = s.get(kc[p]["httpGet"]["path"])
        c.check(st == 200, f"KServe {p}: {st}")
    st, _, r = s.get("/v2/models/demo-reranker")
    c.check(st == 200 and r.get("inputs"), f"KServe metadata route: {r}")

c.finish("e2e_deploy")
