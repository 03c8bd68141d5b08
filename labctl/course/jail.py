"""The fence around a learner's program in a node: the shell text that puts it (and all it
forks) in one cgroup with a bounded number of processes and a bounded file size, and the
text that kills everything in that cgroup afterwards. A program that forks forever, never
exits or writes a file without end is then a failed run, never a lab left busy for the
next one: `lesson check` and `lesson grade` end every run with release().

The node side is plain sh (dash in the images). In a node without a writable cgroup v2
(a container) the program still runs, bounded by its time and file size only."""

from __future__ import annotations

CGROUP = "/sys/fs/cgroup/labctl-lesson"
MAX_PIDS = 256  # processes and threads: a pyverbs program has a handful
# RLIMIT_FSIZE, as `ulimit -f` counts it in dash (512-byte blocks; bash counts 1024): a
# 64 MiB file at most. It binds root too: a larger write ends the program (SIGXFSZ).
FILE_BLOCKS = 131072
RELEASE_SECONDS = 60.0

# Run before the program, in the same shell: the shell joins the cgroup, so every process
# it starts, and theirs, is counted and killed with it. No braces: the two-node lessons'
# commands are `run custom` templates, where braces are placeholders.
ENTER = (f"mkdir -p {CGROUP} 2>/dev/null"
         " && (grep -qw pids /sys/fs/cgroup/cgroup.subtree_control"
         " || echo +pids > /sys/fs/cgroup/cgroup.subtree_control) 2>/dev/null"
         f" && echo {MAX_PIDS} > {CGROUP}/pids.max 2>/dev/null"
         f" && echo $$ > {CGROUP}/cgroup.procs 2>/dev/null; ulimit -f {FILE_BLOCKS}; ")

# Kill everything in the cgroup (cgroup.kill, Linux 5.14: one step, however fast it
# forks) and wait until it is empty; exit 1 when something is still there after 10 s.
RELEASE = (f"[ -d {CGROUP} ] || exit 0; "
           f"echo 1 > {CGROUP}/cgroup.kill 2>/dev/null"
           f" || for p in $(cat {CGROUP}/cgroup.procs); do kill -9 $p; done 2>/dev/null; "
           f"i=0; while [ -s {CGROUP}/cgroup.procs ] && [ $i -lt 100 ]; do "
           "sleep 0.1; i=$((i+1)); done; "
           f"[ ! -s {CGROUP}/cgroup.procs ]")


def fenced(command: str) -> str:
    """`command` (shell text) run inside the fence."""
    return ENTER + command
