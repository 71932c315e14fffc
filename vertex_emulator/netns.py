"""Makes and joins a custom job's private network namespace; run as a script, standard library only.

``python -I -S netns.py make`` unshares a network namespace (root: the network namespace alone;
anyone else: a user namespace too, mapping only this user and group, to themselves, so processes
keep the ids they had), brings its loopback interface up and prints what it made (``net`` or
``user+net``), or ``error: WHY`` and exits 1. It then waits for its standard input to close, so
the parent can open ``/proc/PID/ns/*`` first (an open file keeps the namespace after it exits).

``python -I -S netns.py join NS=FD ... -- COMMAND ...`` joins the namespaces open on those file
descriptors, in that order (``user`` before ``net``), closes them and ``exec``s COMMAND: the
command keeps this process id, so its parent waits for and signals it as its own child. Started
with ``-I -S``, neither reads the environment's ``PYTHON*`` variables, the user's site-packages or
a ``sitecustomize``, and neither imports anything outside the standard library.
"""

import ctypes
import fcntl
import os
import socket
import struct
import sys

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
FLAGS = {"user": CLONE_NEWUSER, "net": CLONE_NEWNET}
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def _libc_call(name, *args):
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{name}: {os.strerror(number)}")


def make():
    """Unshares the namespaces, brings loopback up; returns what was made."""
    uid, gid = os.geteuid(), os.getegid()
    kind = ""
    if uid == 0:
        try:
            _libc_call("unshare", CLONE_NEWNET)
            kind = "net"
        except OSError:
            pass  # No CAP_SYS_ADMIN here (a container): a user namespace may still be allowed.
    if not kind:
        _libc_call("unshare", CLONE_NEWUSER | CLONE_NEWNET)
        kind = "user+net"
        for name, text in (
            ("setgroups", "deny"),  # The kernel's condition for an unprivileged gid_map.
            ("uid_map", f"{uid} {uid} 1"),
            ("gid_map", f"{gid} {gid} 1"),
        ):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))
    return kind


def join(args):
    """Joins the ``NS=FD`` namespaces before ``--``; returns the command after it."""
    split = args.index("--")
    for item in args[:split]:  # In the order given: user before net.
        name, _, fd = item.partition("=")
        _libc_call("setns", int(fd), FLAGS[name])
        os.close(int(fd))
    return args[split + 1 :]


def main():
    """``make`` or ``join``, as the module docstring says."""
    if sys.argv[1:2] == ["make"]:
        try:
            print(make(), flush=True)
        except OSError as e:
            print(f"error: {e}", flush=True)
            sys.exit(1)
        sys.stdin.read()
    elif sys.argv[1:2] == ["join"]:
        try:
            command = join(sys.argv[2:])
        except OSError as e:
            sys.exit(f"ncf-pipelines verify: could not join the job's network namespace: {e}")
        try:
            os.execvp(command[0], command)
        except OSError as e:
            print(f"{command[0]}: {e.strerror}", file=sys.stderr)
            sys.exit(127)  # What a shell answers for a command it cannot run.
    else:
        sys.exit("usage: netns.py make | join NS=FD ... -- COMMAND ...")


if __name__ == "__main__":
    main()
