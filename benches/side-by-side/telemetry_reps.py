#!/usr/bin/env python3
"""Telemetry overhead reps (benches/README.md, "Telemetry overhead").

    telemetry_reps.py OUT REPS LABEL|BINARY|ENV=VALUE[,ENV=VALUE] ...

For each rep, each group (jobs-keyed, bulk) and each configuration, runs
the gaffer child without and with --telemetry (local disk, 1 ms flush,
N 10 000, 16 workers), the order alternating by rep. Before each run it
waits until the machine is quiet (other processes busy less than 0.15 of a
core over 2 s; gives up waiting after 2 h). Appends one row per run to OUT:

    label mode rep workload items/s cpu_s_per_1000 ok other=CORES before=CORES t=HH:MM:SS load=L1,L5,L15

`other`: CPU the rest of the machine used during the run (system busy time
minus the child's own), in cores; `before`: the same in the quiet check;
`load`: the load average (1, 5, 15 min) as the run started.
WAIT_QUIET=0 skips the quiet-machine wait (on a machine that is never
quiet: the rows then say how busy it was), `before` is then `-`.
STORE and N in the environment override the store and the item count.
A configuration's ENV is passed to the child: SBS_FILTER=level (a
with_max_level(INFO) filter), SBS_ANSI=0 (the fmt subscriber without ANSI
styling, with_ansi(false)), SBS_TELEMETRY=fmt|prom, RUST_LOG=FILTER (commas
inside a value are kept: `RUST_LOG=info,taquba=warn,SBS_ANSI=0`); X=1 sets
nothing. GROUPS=jobs-keyed,bulk (the default) chooses the groups.
"""
import json, os, re, resource, subprocess, sys, time


def busy():
    v = list(map(int, open('/proc/stat').readline().split()[1:]))
    return (sum(v) - v[3] - v[4]) / os.sysconf('SC_CLK_TCK')


def wait_quiet():
    t0 = time.time()
    while True:
        b = busy()
        time.sleep(2)
        d = (busy() - b) / 2
        if d < 0.15 or time.time() - t0 > 7200:
            return d


def env_pairs(envs):
    """`A=1,B=2` into its pairs; a comma followed by no `NAME=` belongs to
    the value before it (`RUST_LOG=info,taquba=warn,SBS_ANSI=0`)."""
    pairs = []
    for part in envs.split(','):
        if pairs and not re.match(r'[A-Z_][A-Z0-9_]*=', part):
            pairs[-1] += ',' + part
        else:
            pairs.append(part)
    return pairs


def main():
    out, reps, cfgs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    for rep in range(1, reps + 1):
        for group in os.environ.get('GROUPS', 'jobs-keyed,bulk').split(','):
            for cfg in cfgs:
                label, binary, envs = cfg.split('|')
                binary = os.path.abspath(binary)
                env = dict(os.environ)
                for e in env_pairs(envs):
                    k, v = e.split('=', 1)
                    env[k] = v
                modes = ['none', 'tel'] if rep % 2 else ['tel', 'none']
                for mode in modes:
                    quiet = os.environ.get('WAIT_QUIET', '1') != '0'
                    before = f"{wait_quiet():.2f}" if quiet else '-'
                    load = ','.join(open('/proc/loadavg').read().split()[:3])
                    args = [binary, 'child', '--engine', 'gaffer', '--group', group,
                            '--store', os.environ.get('STORE', 'local'), '--flush', '1ms',
                            '--n', os.environ.get('N', '10000'), '--conc', '16',
                            '--job-workers', '16']
                    if mode == 'tel':
                        args.append('--telemetry')
                    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    b0, w0 = busy(), time.time()
                    p = subprocess.run(args, env=env, cwd='/tmp', stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, text=True)
                    w, b = time.time() - w0, busy() - b0
                    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    own = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
                    other = max(0.0, (b - own) / w)
                    line = [l for l in p.stdout.splitlines() if l.startswith('RESULT ')][0]
                    r = json.loads(line[len('RESULT '):])
                    row = (f"{label} {mode} {rep} {r['workload']} {round(r['items_per_s'])} "
                           f"{r['cpu_s'] / r['n'] * 1000:.4f} {r['ok']} other={other:.2f} "
                           f"before={before} t={time.strftime('%H:%M:%S')} load={load}")
                    with open(out, 'a') as f:
                        f.write(row + '\n')


if __name__ == '__main__':
    main()
