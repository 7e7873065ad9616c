"""Checks a deploy/ directory: every Kubernetes manifest against the API schemas (the
`kubernetes-validate` package from PyPI, offline), and every modelcas subcommand, flag and
MODELCAS_* variable that the manifests and systemd units use against the binary's own
--help; the ConfigMap's config.toml must load (`modelcas --config F config show`), and a
prefetch list in a ConfigMap (a `.toml` key with `[[model]]`) must pass
`modelcas sync F --check`.

usage: deploy_check.py MODELCAS_BIN DEPLOY_DIR
Exits 1 listing every problem.
"""
import glob, os, re, shlex, subprocess, sys, tempfile

import kubernetes_validate
import yaml

BIN, DEPLOY = sys.argv[1], sys.argv[2]
K8S = "1.30.0"
problems = []
_help = {}


def help_text(sub):
    key = tuple(sub)
    if key not in _help:
        r = subprocess.run([BIN, *sub, "--help"], capture_output=True, text=True)
        _help[key] = r.stdout if r.returncode == 0 else None
    return _help[key]


def known_envs():
    subs = [[]] + [[s] for s in re.findall(r"^  ([a-z]+)\s", help_text([]), re.M)]
    out = set()
    for s in subs:
        out |= set(re.findall(r"env: (MODELCAS_[A-Z_]+)=", help_text(s) or ""))
    return out


ENVS = known_envs()


def check_invocation(argv, where):
    if not argv or os.path.basename(argv[0]) != "modelcas":
        return
    words = [a for a in argv[1:] if not a.startswith("-")]
    sub = words[:1]
    if words and words[0] in ("index", "config"):
        sub = words[:2]
    text = help_text(sub)
    if text is None:
        problems.append(f"{where}: `modelcas {' '.join(sub)}` is not a command")
        return
    flags = set(re.findall(r"(--[a-z][a-z0-9-]*)", text))
    for a in argv[1:]:
        if a.startswith("--"):
            name = a.split("=", 1)[0]
            if name not in flags:
                problems.append(f"{where}: `modelcas {' '.join(sub)}` has no flag {name}")


def check_env(name, where):
    if name.startswith("MODELCAS_") and name not in ENVS:
        problems.append(f"{where}: modelcas reads no variable {name}")


def shell_commands(s):
    """modelcas invocations inside a shell snippet."""
    for part in re.split(r"[;&|\n]+", s):
        try:
            words = shlex.split(part)
        except ValueError:
            continue
        if words and words[0] in ("exec",):
            words = words[1:]
        if words and os.path.basename(words[0]) == "modelcas":
            yield words


def walk_containers(spec, where):
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        w = f"{where} container {c.get('name')}"
        argv = list(c.get("command", [])) + list(c.get("args", []))
        if argv[:2] == ["sh", "-c"]:
            for inv in shell_commands(" ".join(argv[2:])):
                check_invocation(inv, w)
        else:
            check_invocation(argv, w)
        for e in c.get("env", []):
            check_env(e["name"], w)
        for hook in ("preStop", "postStart"):
            cmd = c.get("lifecycle", {}).get(hook, {}).get("exec", {}).get("command")
            if cmd:
                check_invocation(cmd, f"{w} {hook}")
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            cmd = c.get(probe, {}).get("exec", {}).get("command")
            if cmd:
                check_invocation(cmd, f"{w} {probe}")


def check_sync_lists(data, where):
    """A prefetch list (a `.toml` key with `[[model]]` entries) must pass `sync --check`."""
    for key, text in data.items():
        if not key.endswith(".toml") or key == "config.toml" or "[[model]]" not in text:
            continue
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
            f.write(text)
        r = subprocess.run([BIN, "sync", f.name, "--check"], capture_output=True, text=True)
        os.unlink(f.name)
        if r.returncode != 0:
            problems.append(f"{where}: {key} is not a valid sync list: {r.stderr.strip()}")


docs = 0
for path in sorted(glob.glob(os.path.join(DEPLOY, "kubernetes", "*.yaml"))):
    name = os.path.basename(path)
    for doc in yaml.safe_load_all(open(path)):
        if not doc:
            continue
        docs += 1
        where = f"{name} {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(doc, K8S, strict=True)
        except kubernetes_validate.ValidationError as e:
            problems.append(f"{where}: {e.message} at {'.'.join(str(p) for p in e.path)}")
        except Exception as e:  # schema lookup and the like
            problems.append(f"{where}: {e}")
        spec = doc.get("spec", {})
        pod = (spec.get("template", {}).get("spec")
               or spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec"))
        if pod:
            walk_containers(pod, where)
        if doc.get("kind") == "ConfigMap" and "config.toml" in doc.get("data", {}):
            with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
                f.write(doc["data"]["config.toml"])
            r = subprocess.run([BIN, "--config", f.name, "config", "show"], capture_output=True, text=True)
            os.unlink(f.name)
            if r.returncode != 0:
                problems.append(f"{where}: config.toml does not load: {r.stderr.strip()}")
        if doc.get("kind") == "ConfigMap":
            check_sync_lists(doc.get("data") or {}, where)

units = 0
for path in sorted(glob.glob(os.path.join(DEPLOY, "systemd", "*"))):
    units += 1
    name = os.path.basename(path)
    for line in open(path):
        line = line.strip()
        m = re.match(r"(ExecStart|ExecStartPre|ExecStop)=-?(.*)", line)
        if m:
            check_invocation(shlex.split(m.group(2)), f"{name} {m.group(1)}")
        m = re.match(r"Environment=(MODELCAS_[A-Z_]+)=", line)
        if m:
            check_env(m.group(1), name)

if docs == 0 or units == 0:
    problems.append(f"nothing checked under {DEPLOY}")
if problems:
    print("\n".join(problems))
    sys.exit(1)
print(f"ok: {docs} Kubernetes documents, {units} systemd units, {len(ENVS)} variables known")
