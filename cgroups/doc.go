// Package cgroups gives each dispatch a fresh leaf cgroup with memory, pids
// and CPU limits, on cgroup v1, hybrid and unified (v2) hosts, and reports
// honestly which of those limits this host lets moat enforce.
//
// # Shape
//
// [Detect] reads /proc/self/mountinfo and /proc/self/cgroup into a [Host]. A
// [Manager] ([New]) picks a parent cgroup, prepares it once and reports its
// [Posture]; [Manager.Create] makes one [Leaf] per dispatch; the leaf can be
// joined at clone time on v2 ([Leaf.FD], for clone3 CLONE_INTO_CGROUP) or by
// pid on v1 ([Leaf.Add]), killed as a whole ([Leaf.Kill]), read ([Leaf.Stats])
// and removed ([Leaf.Delete]). [Manager.CleanStale] removes the leaves of a
// moat process that died without cleaning up.
//
// On a hybrid host (v1 controllers plus an empty cgroup2 mount, the layout of
// many older systemd hosts) the limits live in the v1 hierarchies, one
// directory per controller; the cgroup2 mount has no controllers to offer.
//
// # Where the leaves go
//
// The parent (default name "moat", [WithParent]) is resolved relative to this
// process's own cgroup in each hierarchy, not relative to the hierarchy root:
//
//   - limits an administrator or a container runtime put on us stay in force
//     for every sandbox (memory and pids accounting are hierarchical), so a
//     sandbox can never obtain more than moat itself was given;
//   - it is the same rule as root and rootless: a rootless moat can only write
//     below the subtree it was delegated, which is where it runs;
//   - inside a container with a cgroup namespace, "/" is the container's own
//     cgroup anyway.
//
// An absolute parent ("/moat") is resolved from each hierarchy's root instead,
// for an administrator who prepared a dedicated subtree.
//
// On v2 the "no internal processes" rule applies (cgroup_v2.rst, "No Internal
// Process Constraint"): controllers can only be enabled in the
// cgroup.subtree_control of a group without processes. If moat runs directly
// in its delegated group, enabling controllers for the "moat" child fails with
// EBUSY and the posture says so, unless moat may move itself into a leaf of
// its own (rootless, below). As
// root, WithParent("/moat") puts the parent below the hierarchy root, which
// the rule exempts (the layout of runc's cgroupfs driver).
//
// # Rootless
//
// Without root a cgroup can only be created where an administrator or systemd
// delegated a subtree to the user. On cgroup v2, with no parent given, [New]
// looks in this order ([Posture].Source says which path it took):
//
//   - [SourceDelegated]: this process's own group is delegated (writable,
//     offering memory, pids and cpu: a user@.service subtree, a Delegate=yes
//     unit or scope). When this process is alone in it, it first moves itself
//     into a leaf of its own there (moat-self-PID-START), so that the
//     controllers can be enabled for the leaves' parent, and the last
//     [Manager.Close] of the process gives the group back: the controllers
//     it turned on go off and the process moves back, so the group can take
//     processes again;
//   - [SourceSystemdScope]: otherwise, with [WithSystemdBus], it asks the
//     user's systemd manager for a transient moat-PID-START.scope with
//     Delegate=yes holding this process (systemd.resource-control(5),
//     "Delegate="; podman and crun do the same), after stopping the scopes
//     of moat processes that are gone (only scopes with moat's exact name
//     and description), and works below it. Later Managers of
//     the same process share it; systemd removes it when the process ends.
//   - [SourceNone]: no bus, or systemd refused; the reason says which.
//
// As root nothing is asked of systemd (see native's defaultCgroups for why),
// and v1 hierarchies are never delegated by systemd. Without a usable
// cgroup [New] still succeeds, [Posture] reports every limit as degraded
// with the fix, and [Manager.Create] returns an error wrapping
// [ErrNoDelegation]; the caller falls back to rlimits and a wall-clock kill.
// A policy that marks a limit as required is refused with a
// [*RequiredError] from [Posture.Require].
//
// RLIMIT_NPROC is no substitute for the pids limit on kernels before 5.14:
// there it counts every process of the real uid, so when all sandboxes (and
// moat itself) share one uid, as rootless sandboxes do, it is one budget for
// all of them, not a per-sandbox limit (setrlimit(2), peers.md attack 18).
// Since 5.14 fork checks the count of the uid in the caller's own user
// namespace (kernel/ucount.c), which for a sandbox is that sandbox alone, and
// the native provider sets it where no cgroup holds the pids limit, as a
// stand-in that neither [Posture] nor [Posture.Require] counts as enforced
// (executor/native/standin.go).
//
// # Stale leaves
//
// A leaf's name records its owner: "<owner pid>-<owner start time>-<id>". The
// start time (field 22 of /proc/<pid>/stat, proc(5)) defends against pid
// reuse: a leaf is stale when no process with that pid and that start time
// exists. Only names of that form are ever touched.
//
// # At an OCI cgroupsPath
//
// [CreatePath] puts one group exactly where an OCI config's
// linux.cgroupsPath names it, as runc's cgroupfs driver resolves it, for
// moat-runtime (engines read a container's numbers there); [OpenPath]
// opens it in another process, and its Leaf's Delete removes only the
// levels CreatePath made. [StartScope] is the systemd driver's form
// ("slice:prefix:name"): a transient scope with Delegate=yes that the
// system manager makes holding the container's init. The path is the
// caller's, so it is checked as attack surface (path_linux.go): a
// [*PathError] refuses "..", a symlink or mount on the way, and a group
// that already holds processes or groups.
//
// # Symlinks
//
// The directories made and written here meet the rule of nsexec/hostpath
// (a symlink is followed only if root or the caller could have planted it)
// by construction rather than by a walk: each path is a mountpoint as the
// kernel prints it in /proc/self/mountinfo (resolved, with no link in it:
// /sys/fs/cgroup/cpu,cpuacct, never the cpu link to it), joined with this
// process's cgroup from /proc/self/cgroup and a parent that checkParent
// holds to clean names without "..", so every component below the
// mountpoint lies in cgroupfs, where no one, root included, can create a
// symlink (kernfs offers no symlink operation: EPERM), and the components
// above it are the directories mountpoints sit in (/sys/fs/cgroup, root's).
package cgroups
