"""Checks a deploy/ directory: every Kubernetes manifest against the API schemas (the
`kubernetes-validate` package from PyPI, offline), and every modelcas subcommand, flag and
MODELCAS_* variable that the manifests and systemd units use against the binary's own
--help; the ConfigMap's config.toml must load (`modelcas --config F config show`), and a
prefetch list in a ConfigMap (a `.toml` key with `[[model]]`) must pass
`modelcas sync F --check`.

The CSI volumes (driver csi.modelcas.io, docs/OPERATIONS.md "Kubernetes volumes (CSI)"):
the CSIDriver object must exist with the settings the plugin relies on; every pod volume
of the driver must be read-only and name a `repo`; a PersistentVolume of it must be
ReadOnlyMany; no container of a DaemonSet running `modelcas mountd` or `modelcas csi`
may unmount in a preStop hook, and mountd may have no liveness probe (either ends every
volume of the node); the plugin's socket, its sidecars' --csi-address, the registrar's
--kubelet-registration-path and mountd's socket must meet on the same host paths.
`$(VAR)` in a container's command or args must name one of its variables (Kubernetes
leaves an unknown one as it is). No systemd unit may unmount
(ExecStop/ExecStartPre umount): a mount lives as long as its holder.

usage: deploy_check.py MODELCAS_BIN DEPLOY_DIR
Exits 1 listing every problem.
"""
import glob, os, re, shlex, subprocess, sys, tempfile

import kubernetes_validate
import yaml

BIN, DEPLOY = sys.argv[1], sys.argv[2]
K8S = "1.30.0"
DRIVER = "csi.modelcas.io"
# Where `modelcas mountd` listens and `modelcas csi` calls it, unless told otherwise.
MOUNTD_SOCKET = "/run/modelcas/mountd.sock"
# A reference Kubernetes expands in command and args ($$(X) is a literal $(X)).
VAR_REF = re.compile(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
UNMOUNTS = re.compile(r"\b(umount|fusermount3?)\b")
OPS = 'docs/OPERATIONS.md, "Kubernetes volumes (CSI)"'
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


def containers(pod):
    return pod.get("containers", []) + pod.get("initContainers", [])


def argv_of(c):
    return list(c.get("command", [])) + list(c.get("args", []))


def invocations(c):
    """The modelcas command lines a container runs (directly or in `sh -c`)."""
    argv = argv_of(c)
    if argv[:2] == ["sh", "-c"]:
        return list(shell_commands(" ".join(argv[2:])))
    return [argv] if argv and os.path.basename(argv[0]) == "modelcas" else []


def subcommand(argv):
    words = [a for a in argv[1:] if not a.startswith("-")]
    return words[0] if words else None


def env_values(c):
    return {e["name"]: e.get("value") for e in c.get("env", [])}


def expand(s, env):
    """`s` with the $(VAR) references Kubernetes would expand from the literal `env`."""
    return VAR_REF.sub(lambda m: env.get(m.group(1)) or m.group(0), s)


def flag(argv, name):
    """The value of --name V or --name=V in argv, else None."""
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def check_var_refs(c, w, keys_of):
    """Kubernetes expands $(VAR) in command and args from the container's variables and
    leaves an unknown one as it is: a typo passes "$(NODE_NAM)" on as the value."""
    argv = argv_of(c)
    if argv[:2] == ["sh", "-c"]:
        return  # a $(...) there may be the shell's command substitution
    known = {e["name"] for e in c.get("env", [])}
    for src in c.get("envFrom", []):
        ref = src.get("configMapRef") or src.get("secretRef") or {}
        keys = keys_of.get(ref.get("name"))
        if keys is None:
            return  # an object defined elsewhere: its keys are unknown here
        known |= {src.get("prefix", "") + k for k in keys}
    for a in argv:
        for m in VAR_REF.finditer(a):
            if m.group(1) not in known:
                problems.append(f"{w}: $({m.group(1)}) names no variable of the container "
                                "(Kubernetes passes it on as it is)")


def walk_containers(spec, where, keys_of):
    for c in containers(spec):
        w = f"{where} container {c.get('name')}"
        for inv in invocations(c):
            check_invocation(inv, w)
        check_var_refs(c, w, keys_of)
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


def pod_spec(doc):
    spec = doc.get("spec") or {}
    if doc.get("kind") == "Pod":
        return spec
    return (spec.get("template", {}).get("spec")
            or spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec"))


def locate(pod, c, path):
    """(volume, path inside it) that holds `path` of container c, or None."""
    best = None
    for m in c.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/")
        if (path == mp or path.startswith(mp + "/")) and (best is None or len(mp) > len(best[0])):
            best = (mp, m)
    if best is None:
        return None
    mp, m = best
    rest = path[len(mp):]
    if m.get("subPath"):
        rest = "/" + m["subPath"].strip("/") + rest
    vol = next((v for v in pod.get("volumes", []) if v["name"] == m["name"]), {})
    return vol, rest


def host_path(pod, c, path):
    """The node's path behind `path` of container c, or None when no hostPath holds it."""
    found = locate(pod, c, path)
    if not found or "hostPath" not in found[0]:
        return None
    return found[0]["hostPath"]["path"].rstrip("/") + found[1]


def mountd_socket(argv, sub, c):
    """The socket a `modelcas mountd` or `modelcas csi` command line listens on or calls."""
    return (flag(argv, "--socket" if sub == "mountd" else "--mountd-socket")
            or env_values(c).get("MODELCAS_MOUNTD_SOCKET") or MOUNTD_SOCKET)


def check_csi_pod(pod, where, kind):
    """The node side of the driver: mountd, the plugin and its sidecars."""
    subs = {subcommand(inv) for c in containers(pod) for inv in invocations(c)}
    if kind == "DaemonSet" and subs & {"mountd", "csi"}:
        for c in containers(pod):
            cmd = (c.get("lifecycle", {}).get("preStop") or {}).get("exec", {}).get("command")
            if cmd and UNMOUNTS.search(" ".join(cmd)):
                problems.append(f"{where} container {c.get('name')}: preStop unmounts "
                                f"({' '.join(cmd)}): killing or upgrading this pod must not "
                                f"end the node's volumes ({OPS})")
    for c in containers(pod):
        w = f"{where} container {c.get('name')}"
        if (any(m.get("mountPropagation") == "Bidirectional" for m in c.get("volumeMounts", []))
                and not c.get("securityContext", {}).get("privileged")):
            problems.append(f"{w}: mountPropagation: Bidirectional needs privileged: true "
                            "(the API server refuses it otherwise)")
        for argv in invocations(c):
            sub = subcommand(argv)
            if sub not in ("mountd", "csi"):
                continue
            env = env_values(c)
            sock = expand(mountd_socket(argv, sub, c), env)
            host = host_path(pod, c, sock)
            if host is None:
                problems.append(f"{w}: mountd's socket {sock} is on no hostPath volume: "
                                + ("the plugin and the next mountd cannot reach it" if sub == "mountd"
                                   else "the plugin cannot reach mountd"))
            else:
                sockets[sub].append((host, w))
            if sub == "mountd" and "livenessProbe" in c:
                problems.append(f"{w}: mountd must have no livenessProbe: a restart of this "
                                f"container ends every volume of the node ({OPS})")
            if sub == "csi":
                check_node_plugin(pod, c, argv, env, w, where)


def check_node_plugin(pod, c, argv, env, w, where):
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    if not any(m.get("mountPropagation") == "Bidirectional"
               and vols.get(m["name"], {}).get("hostPath", {}).get("path", "").rstrip("/")
               == m["mountPath"].rstrip("/")
               for m in c.get("volumeMounts", [])):
        problems.append(f"{w}: mounts no hostPath at its own path (kubelet's directory, "
                        "/var/lib/kubelet) with mountPropagation: Bidirectional: the volumes "
                        "it mounts would reach no pod")
    ep = expand(flag(argv, "--endpoint") or env.get("CSI_ENDPOINT") or "", env)
    if not ep.startswith("unix://"):
        problems.append(f"{w}: `modelcas csi` needs --endpoint unix:///PATH (or CSI_ENDPOINT); "
                        f"has {ep or 'none'}")
        return
    sock = ep[len("unix://"):]
    where_sock = locate(pod, c, sock)
    host_sock = host_path(pod, c, sock)
    if host_sock is None:
        problems.append(f"{w}: the plugin's socket {sock} is on no hostPath volume: kubelet "
                        "cannot reach it")
    for o in containers(pod):
        if o is c:
            continue
        oenv, oargv = env_values(o), argv_of(o)
        addr = flag(oargv, "--csi-address")
        if addr is not None:
            addr = expand(addr, oenv)
            path = addr[len("unix://"):] if addr.startswith("unix://") else addr
            if where_sock is None or locate(pod, o, path) != where_sock:
                problems.append(f"{where} container {o.get('name')}: --csi-address {addr} is "
                                f"not the plugin's socket (--endpoint {ep} of container "
                                f"{c.get('name')})")
        reg = flag(oargv, "--kubelet-registration-path")
        if reg is not None and host_sock is not None and expand(reg, oenv) != host_sock:
            problems.append(f"{where} container {o.get('name')}: --kubelet-registration-path "
                            f"{reg} is not where the plugin's socket is on the node "
                            f"({host_sock}): kubelet would call nothing")


def check_attributes(attrs, w):
    repo = attrs.get("repo")
    if not repo:
        problems.append(f"{w}: no `repo` attribute (ORG/NAME): the plugin refuses the volume")
    elif not re.fullmatch(r"[^/\s@]+/[^/\s@]+", str(repo)):
        problems.append(f"{w}: repo {repo!r} is not ORG/NAME")
    for k in attrs:
        if k not in ("repo", "revision"):
            problems.append(f"{w}: unknown volume attribute {k!r} (the driver reads repo and "
                            "revision)")


def check_volumes(pod, where, ns):
    for v in pod.get("volumes", []):
        w = f"{where} volume {v.get('name')}"
        csi = v.get("csi")
        if csi and csi.get("driver") == DRIVER:
            uses.setdefault("Ephemeral", w)
            if csi.get("readOnly") is not True:
                problems.append(f"{w}: a {DRIVER} volume must set csi.readOnly: true (the "
                                "plugin refuses a writable one)")
            check_attributes(csi.get("volumeAttributes") or {}, w)
        claim = v.get("persistentVolumeClaim")
        if claim:
            claims.append((ns, claim.get("claimName"), claim.get("readOnly") is True, w))


# Every document first: the cross checks need all of them.
objs = []
for path in sorted(glob.glob(os.path.join(DEPLOY, "kubernetes", "*.yaml"))):
    name = os.path.basename(path)
    for doc in yaml.safe_load_all(open(path)):
        if doc:
            objs.append((f"{name} {doc.get('kind')}/{doc.get('metadata', {}).get('name')}", doc))

keys_of = {}
for _, doc in objs:
    if doc.get("kind") in ("ConfigMap", "Secret"):
        keys = set()
        for field in ("data", "stringData", "binaryData"):
            keys |= set((doc.get(field) or {}).keys())
        keys_of[doc.get("metadata", {}).get("name")] = keys

# Whether some ConfigMap's config.toml names the Xet key or turns Xet off (`[serve]`).
XET_KEY_SET = any(
    re.search(r"^\s*(xet_secret_file\s*=|xet\s*=\s*false)", d["data"]["config.toml"], re.M)
    for _, d in objs
    if d.get("kind") == "ConfigMap" and "config.toml" in (d.get("data") or {}))


def check_serve_replicas(doc, pod, where):
    """Replicas of `modelcas serve` behind one address must share one Xet key: each one
    refuses the tokens and URLs the others hand out (a client's next request may reach
    another replica), and a replica's kept key is its own."""
    replicas = (doc.get("spec") or {}).get("replicas", 1)
    if doc.get("kind") not in ("Deployment", "StatefulSet", "ReplicaSet") or replicas <= 1:
        return
    for c in containers(pod):
        env = env_values(c)
        for argv in invocations(c):
            if subcommand(argv) != "serve":
                continue
            if (flag(argv, "--xet-secret-file") or "--no-xet" in argv or XET_KEY_SET
                    or "MODELCAS_SERVE_XET_SECRET_FILE" in env or "MODELCAS_SERVE_NO_XET" in env):
                continue
            problems.append(f"{where} container {c.get('name')}: {replicas} replicas of "
                            "`modelcas serve` without --xet-secret-file: each signs Xet tokens "
                            "with a key of its own and refuses the others' (mount one Secret "
                            "in all of them, or pass --no-xet)")


sockets = {"mountd": [], "csi": []}
uses = {}  # volume lifecycle mode -> the first place using it
claims = []  # (namespace, claim, readOnly, where) of pod volumes
pvs, pvcs, csidrivers = {}, {}, {}
for where, doc in objs:
    try:
        kubernetes_validate.validate(doc, K8S, strict=True)
    except kubernetes_validate.ValidationError as e:
        problems.append(f"{where}: {e.message} at {'.'.join(str(p) for p in e.path)}")
    except Exception as e:  # schema lookup and the like
        problems.append(f"{where}: {e}")
    kind, meta, spec = doc.get("kind"), doc.get("metadata", {}), doc.get("spec") or {}
    pod = pod_spec(doc)
    if pod:
        walk_containers(pod, where, keys_of)
        check_csi_pod(pod, where, kind)
        check_volumes(pod, where, meta.get("namespace", "default"))
        check_serve_replicas(doc, pod, where)
    if kind == "ConfigMap" and "config.toml" in doc.get("data", {}):
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
            f.write(doc["data"]["config.toml"])
        r = subprocess.run([BIN, "--config", f.name, "config", "show"], capture_output=True, text=True)
        os.unlink(f.name)
        if r.returncode != 0:
            problems.append(f"{where}: config.toml does not load: {r.stderr.strip()}")
    if kind == "ConfigMap":
        check_sync_lists(doc.get("data") or {}, where)
    if kind == "CSIDriver":
        csidrivers[meta.get("name")] = (where, spec)
    if kind == "PersistentVolume" and (spec.get("csi") or {}).get("driver") == DRIVER:
        uses.setdefault("Persistent", where)
        pvs[meta.get("name")] = spec.get("accessModes") or []
        if set(spec.get("accessModes") or []) != {"ReadOnlyMany"}:
            problems.append(f"{where}: a PersistentVolume of {DRIVER} must be ReadOnlyMany only "
                            f"(has {spec.get('accessModes')}): the plugin refuses writer modes")
        check_attributes(spec["csi"].get("volumeAttributes") or {}, where)
    if kind == "PersistentVolumeClaim":
        pvcs[(meta.get("namespace", "default"), meta.get("name"))] = (
            spec.get("volumeName"), spec.get("accessModes") or [], where)

for ns, claim, read_only, w in claims:
    volume = pvcs.get((ns, claim), (None,))[0]
    if volume in pvs and not read_only:
        problems.append(f"{w}: claim {claim} is bound to a {DRIVER} PersistentVolume "
                        f"({volume}): persistentVolumeClaim.readOnly must be true (the plugin "
                        "refuses a writable one)")
for volume, modes, w in pvcs.values():
    if volume in pvs and not set(modes) <= set(pvs[volume]):
        problems.append(f"{w}: asks for {modes} but PersistentVolume {volume} offers "
                        f"{pvs[volume]}: the claim never binds")

if uses or sockets["csi"] or sockets["mountd"]:
    if DRIVER not in csidrivers:
        first = next(iter(uses.values()), None) or (sockets["csi"] + sockets["mountd"])[0][1]
        problems.append(f"{first}: uses {DRIVER}, but no CSIDriver {DRIVER} is defined "
                        f"in {os.path.join(DEPLOY, 'kubernetes')}")
    if sockets["csi"] and not sockets["mountd"]:
        problems.append(f"{sockets['csi'][0][1]}: runs the plugin, but no container runs "
                        "`modelcas mountd`, which must hold its volumes")
    if sockets["mountd"]:
        held = sorted({h for h, _ in sockets["mountd"]})
        for host, w in sockets["csi"]:
            if host not in held:
                problems.append(f"{w}: the plugin's mountd socket is {host} on the node, "
                                f"mountd's is {', '.join(held)}")
if DRIVER in csidrivers:
    where, spec = csidrivers[DRIVER]
    if spec.get("attachRequired") is not False:
        problems.append(f"{where}: attachRequired must be false: there is no controller "
                        "plugin, and kubelet would wait for an attachment forever")
    if spec.get("podInfoOnMount") is not True:
        problems.append(f"{where}: podInfoOnMount must be true: the plugin tells inline "
                        "volumes by csi.storage.k8s.io/ephemeral, which kubelet sends only then")
    if spec.get("fsGroupPolicy") != "None":
        problems.append(f"{where}: fsGroupPolicy must be None: the volumes are read-only")
    modes = spec.get("volumeLifecycleModes") or ["Persistent"]
    for mode, w in uses.items():
        if mode not in modes:
            problems.append(f"{where}: volumeLifecycleModes lacks {mode}, which {w} needs")

units = 0
for path in sorted(glob.glob(os.path.join(DEPLOY, "systemd", "*"))):
    units += 1
    name = os.path.basename(path)
    for line in open(path):
        line = line.strip()
        m = re.match(r"(Exec(?:Start|StartPre|StartPost|Reload|Stop|StopPost))=[-@:+!]*(.*)", line)
        if m:
            check_invocation(shlex.split(m.group(2)), f"{name} {m.group(1)}")
            if m.group(1) != "ExecStart" and UNMOUNTS.search(m.group(2)):
                problems.append(f"{name} {m.group(1)}: unmounts ({m.group(2)}): a mount lives as "
                                "long as its holder, a restart would run this too, and "
                                "`modelcas mount` clears a dead mount itself")
        m = re.match(r"Environment=(MODELCAS_[A-Z_]+)=", line)
        if m:
            check_env(m.group(1), name)

if not objs or units == 0:
    problems.append(f"nothing checked under {DEPLOY}")
if problems:
    print("\n".join(problems))
    sys.exit(1)
print(f"ok: {len(objs)} Kubernetes documents, {units} systemd units, {len(ENVS)} variables known")
