// Package hostpath resolves the host paths moat opens or creates on a
// caller's behalf (the ledger and its lock, the workdir base, policy files,
// a rootfs, bind sources, state, lock and socket directories, pid and log
// files) so that no one but root and the caller can redirect them with a
// symbolic link.
//
// # The rule
//
// A symlink met in any component of the path, the last one included, is
// followed only if no one but root or the caller could have planted it:
//
//   - the link is owned by root or by the caller (the effective uid; as root
//     that is root alone), and
//   - the directory holding it, and every directory the walk passed through
//     to reach that directory, is owned by root or the caller and can be
//     written by no one else: neither group- nor other-writable, unless it
//     is sticky, and
//   - in a sticky directory that others may write (/tmp), the link has one
//     name only.
//
// Why each part. Whoever can write a directory can create, rename and
// replace its entries, so a link there is as good as theirs, whoever owns
// its inode: they may have moved root's link in from elsewhere, or
// hard-linked it (possible for a symlink with fs.protected_hardlinks=0).
// The same holds for everything below such a directory: its owner or
// writers can swap a whole subtree, root-owned links included, so once the
// walk went through a directory others can write, no later link is
// followed either. A group-writable directory counts as writable by
// others: which users a group holds is the name service's to say, not the
// kernel's, and OpenSSH's StrictModes and sudo make the same call. A sticky
// directory is the exception (sticky(7), the restricted deletion flag):
// others may add entries to it but not remove, rename over or replace one
// they do not own, so an entry of root's or the caller's in /tmp was put
// there by them. What others can still add is a hard link to a link of
// root's (with fs.protected_hardlinks=0), which then has two names: hence
// the one-name condition, checked on the very inode read. This is the
// kernel's fs.protected_symlinks rule (a link in a sticky world-writable
// directory is followed only if its owner is the follower or the
// directory's owner), tightened to root's and the caller's links in
// directories no one else can write, and applied to every component
// rather than to sticky directories only.
//
// What the rule does not refuse: a directory or file that is not a link,
// wherever it lies. A path through another user's directory
// (/home/alice/proj as root) is resolved, but no link below that directory
// is followed; the object it names is what it is, and each caller judges it
// (the ledger must be the caller's file, mode 0600; a state directory must
// be the caller's, writable by no one else). Refusing such paths outright
// would forbid root every path under a user's home, and would add nothing
// against links, which are what redirect a root process to a file the
// caller cannot reach.
//
// # TrustOnlyRoot
//
// A rootless sandbox writes as the caller's own uid, so a link an earlier
// sandbox left in a kept workdir is owned by the caller. Paths that a
// sandbox may have written under (its workdir, bind sources, a rootfs) are
// therefore resolved with TrustOnlyRoot: the caller counts as anyone else,
// and only root's links in root's directories are followed (/var/run ->
// /run, the /sys/fs/cgroup/cpu -> cpu,cpuacct of a hybrid cgroup host).
//
// # How
//
// A path with no symlink in it is opened in one openat2(2) with
// RESOLVE_NO_SYMLINKS (the rule judges links only; about 4 µs, as before
// this package). Any other goes to the walk (about 55 µs for a
// nine-component path with one link; BenchmarkOpen), which is by
// descriptor and never looks a name up twice: each
// component is opened with openat(2) O_PATH|O_NOFOLLOW relative to the
// descriptor of the directory before it, judged by fstat(2) of that
// descriptor, and a link's target is read with readlinkat(2) on the link's
// own descriptor (an empty name, Linux 2.6.39), so what is judged is what is
// read. A relative target goes on from the link's directory, an absolute
// one from /, ".." goes back to the directory the walk came from (as the
// kernel's does), and at most 40 links are followed in one walk (the
// kernel's MAXSYMLINKS, include/linux/namei.h). The last component is
// opened with the caller's flags and O_NOFOLLOW and must be the inode the
// walk judged. Callers get that descriptor, or the parent directory's
// (OpenParent) for *at(2) calls, never a path string to resolve again; the
// resolved path, with no symlink in it, is for messages and for a sandbox
// child that must reopen the same inode in its own mount namespace.
//
// # Where it lives
//
// It is a leaf: it imports nothing of moat's, only x/sys, so that every
// layer that opens a caller's path (ledger, policies, seccomp, cgroups,
// nsexec, executor, the commands) resolves it with the one rule instead of
// a copy each, without importing anything above itself. It sits under
// nsexec, which owns a caller's host paths (the top-level folders are
// fixed); conformance's import-graph test pins it as a leaf.
package hostpath
