"""What an rxe guest sees of the host: only what it needs, read-only.

The guest's root is a tmpfs its /init builds; on it, over virtio-9p (each its own
read-only export, so the guest cannot climb out of one):
  /usr                  the system's programs and libraries (perftest, rdma, libibverbs);
                        /bin, /lib, /sbin, /lib64 as the host links them into /usr (or
                        exported themselves on a host whose /usr is not merged)
  /etc                  a minimal /etc this module writes into the host's run dir: the
                        loader's cache, libibverbs' provider list, rdma-core and
                        iproute2 config, and generated passwd/group/hosts -- never the
                        host's /etc (no shadow, no keys)
  the package's tree, its virtualenv and the Python it was made from, at their own paths
The host's /, /root, /home, /proc, other labs' run dirs: not exported at all.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import RocelabError

TOP_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")  # merged into /usr on Debian 12
# What the guest's programs read from /etc, copied (world-readable regular files and
# symlinks only: anything the host keeps private stays private).
ETC_COPIED = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "libibverbs.d", "rdma", "iproute2",
              "alternatives", "localtime", "os-release", "protocols", "services", "gai.conf")
ETC_WRITTEN = {
    "passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "group": "root:x:0:\nnogroup:x:65534:\n",
    "hosts": "127.0.0.1\tlocalhost\n::1\tlocalhost\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files\n",
    "resolv.conf": "",
}
BAD_PATH_CHARS = (",", ":", " ", "\t", "\n", "=")  # what the kernel command line list cannot carry


class GuestFsError(RocelabError):
    pass


@dataclass(frozen=True)
class Export:
    tag: str  # virtio-9p mount tag
    host: Path  # what QEMU serves
    guest: str  # where the guest mounts it


def package_dirs(repo: Path) -> list[Path]:
    """The package's tree, the venv and the Python it was made from (outermost only,
    none that /usr already holds)."""
    roots = {repo.resolve(), Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(),
             Path(sys.executable).resolve().parent}
    roots = {r for r in roots if not _under(r, Path("/usr"))}
    return sorted(r for r in roots if not any(o != r and _under(r, o) for o in roots))


def _under(p: Path, top: Path) -> bool:
    return p == top or top in p.parents


def top_links(root: Path = Path("/")) -> tuple[dict[str, str], list[Path]]:
    """The host's /bin, /lib... : {name: link target} where they are links into /usr,
    and the directories among them (a host whose /usr is not merged) to export."""
    links, dirs = {}, []
    for name in TOP_LINKS:
        p = root / name
        if p.is_symlink():
            links[name] = os.readlink(p)
        elif p.is_dir():
            dirs.append(p)
    return links, dirs


def exports(etc: Path, repo: Path) -> list[Export]:
    """Every directory the guest mounts, each its own 9p export."""
    _, dirs = top_links()
    wanted = [Path("/usr"), *dirs, *package_dirs(repo)]
    out = [Export("etc", etc, "/etc")]
    out += [Export(f"x{i}", d, str(d)) for i, d in enumerate(wanted)]
    for e in out:
        bad = [c for c in BAD_PATH_CHARS if c in e.guest or c in str(e.host)]
        if bad:
            raise GuestFsError(f"an rxe guest cannot mount {e.host}: its path holds {bad[0]!r} "
                               "(move the checkout or virtualenv to a plain path)")
    return out


def build_etc(dest: Path, hostname: str, source: Path = Path("/etc")) -> Path:
    """A fresh minimal /etc for one guest in `dest` (replaced if there)."""
    if dest.is_symlink() or dest.is_file():
        dest.unlink()
    elif dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(mode=0o755)
    for name in ETC_COPIED:
        _copy_public(source / name, dest / name)
    for name, text in {**ETC_WRITTEN, "hostname": hostname + "\n"}.items():
        (dest / name).write_text(text)
        (dest / name).chmod(0o644)
    (dest / "mtab").symlink_to("../proc/self/mounts")
    return dest


def _copy_public(src: Path, dst: Path) -> None:
    """A symlink as a link (resolved in the guest's view, not the host's); a regular file
    if everyone may read it; a directory's such entries, recursively."""
    if src.is_symlink():
        dst.symlink_to(os.readlink(src))
    elif src.is_dir():
        dst.mkdir(mode=0o755)
        for child in sorted(src.iterdir()):
            _copy_public(child, dst / child.name)
    elif src.is_file() and src.stat().st_mode & 0o004:
        shutil.copyfile(src, dst)
        dst.chmod(0o644)


def cmdline(exports_: list[Export], links: dict[str, str]) -> list[str]:
    """The kernel command line words /init reads: tag:path per export, name:target per link."""
    return [f"rocelab.mounts={','.join(f'{e.tag}:{e.guest}' for e in exports_)}",
            f"rocelab.links={','.join(f'{n}:{t}' for n, t in sorted(links.items()))}"]
