"""The child process of one tool call (run as `python child.py`, the call's spec on stdin in the parent's marshal;
stdlib only).

It closes itself in before running anything of the call: new user, network, mount and PID namespaces (no network
device but a loopback that is down; every mount read-only but the workspace, bound writable; the call is PID 1 of
its namespace, so when it or this process dies every process it started dies too), then resource limits, then
the workspace as its working directory. Then it runs the call:

    bash    exec the argv (the environment was scrubbed by the parent); its output is the result
    read    a file of the workspace (skill_rl/tools/workspace.py's `inside`); JSON {"result"} or {"error"} on stdout
    python  a function of the skill's tools.py, called with the workspace and the validated arguments; the same JSON
            (what the function prints goes to stderr, which the parent discards)
    probe   nothing: whether the namespaces could be made (exit status 0)

`isolate` is "required" (a failure to make the namespaces exits 125 with the reason), or "none" (the parent
found at its probe that this machine refuses them, and said so).
"""

import ctypes
import marshal
import os
import resource
import sys

# linux/sched.h, linux/mount.h, sys/prctl.h
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 1 << 18
MOUNT_ATTR_RDONLY, AT_RECURSIVE, AT_FDCWD = 1, 0x8000, -100
SYS_MOUNT_SETATTR, PR_SET_PDEATHSIG = 442, 1
NOT_ISOLATED = 125


class _MountAttr(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("attr_set", "attr_clr", "propagation", "userns_fd")]


def _check(result: int, what: str) -> None:
    if result != 0:
        raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")


def _read_only_but(libc, workspace: str) -> None:
    """Every mount read-only, recursively, then the workspace (bound onto itself) writable again."""
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount private")
    _check(libc.mount(workspace.encode(), workspace.encode(), None, MS_BIND | MS_REC, None), "bind workspace")
    for path, attr in ((b"/", _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)), (workspace.encode(), _MountAttr(0, 1, 0, 0))):
        _check(
            libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path, AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)),
            "mount_setattr",
        )


def isolate(workspace: str) -> None:
    """User, network, mount and PID namespaces; returns in the call's process (PID 1 of the new namespace)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    uid, gid = os.getuid(), os.getgid()
    os.unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWPID)
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    _read_only_but(libc, workspace)
    pid = os.fork()
    if pid == 0:
        # the call dies with this process
        libc.prctl(PR_SET_PDEATHSIG, 9)
        return
    _, status = os.waitpid(pid, 0)
    os._exit(os.waitstatus_to_exitcode(status) % 256)


def limit(limits: dict, namespaced: bool) -> None:
    for name, value in limits.items():
        # outside a user namespace the process count is the whole user's: not limited there
        if name != "NPROC" or namespaced:
            resource.setrlimit(getattr(resource, f"RLIMIT_{name}"), (value, value))


def _answer(fd: int, **fields) -> None:
    # json only here: its import (re, enum) was a third of a command's start
    import json

    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(fields, out)


def _python(spec: dict, workspace: str) -> dict:
    """Call the tool function; its result or the error as fields of the answer."""
    import importlib.util
    from pathlib import Path

    sys.path.insert(0, os.path.dirname(spec["source"]))
    module_spec = importlib.util.spec_from_file_location("skill_rl_tools_call", spec["source"])
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module
    module_spec.loader.exec_module(module)
    value = getattr(module, spec["function"])(Path(workspace), **spec["arguments"])
    if not isinstance(value, str):
        return {"error": f"returned {type(value).__name__}, not text"}
    return {"result": value}


def _read(spec: dict, workspace: str) -> dict:
    # on the PYTHONPATH the parent set
    from skill_rl.tools.workspace import inside

    path = inside(workspace, spec["path"])
    with open(path, "rb") as f:
        data = f.read(spec["cap"] + 1)
    return {"result": data.decode("utf-8", errors="replace")}


def run(spec: dict) -> None:
    workspace = spec["workspace"]
    if spec["kind"] == "bash":
        try:
            os.execvp(spec["argv"][0], spec["argv"])
        # not found, not executable, or a word that is no file name (a NUL, a lone surrogate)
        except (OSError, ValueError) as e:
            print(f"{spec['argv'][0]!r}: {getattr(e, 'strerror', None) or e}", file=sys.stderr)
            os._exit(127)
    # what the function prints goes to stderr; the answer to the saved stdout
    answer_fd = os.dup(1)
    os.dup2(2, 1)
    try:
        fields = _python(spec, workspace) if spec["kind"] == "python" else _read(spec, workspace)
    except BaseException as e:
        text = " ".join(str(e).split())[:300]
        fields = {"error": f"{type(e).__name__}: {text}" if text else type(e).__name__}
    _answer(answer_fd, **fields)


def main() -> None:
    # the parent's marshal of the spec: the same interpreter wrote it (see sandbox.run_child)
    spec = marshal.loads(sys.stdin.buffer.read())
    fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(fd, 0)
    namespaced = spec["isolate"] == "required"
    if namespaced:
        try:
            isolate(spec["workspace"])
        except OSError as e:
            print(f"namespaces refused: {e}", file=sys.stderr)
            os._exit(NOT_ISOLATED)
    limit(spec["limits"], namespaced)
    os.chdir(spec["workspace"])
    if spec["kind"] != "probe":
        run(spec)


if __name__ == "__main__":
    main()
