#!/usr/bin/env python3
"""Multi-process lane benchmark (docs/distributed.md, "Measured"): for 1, 2 and 4 processes on loopback,
and for 2 processes in two network namespaces joined by a veth link shaped with `tc netem` (10 and 100
Gbit/s-like rate and latency), one quantization of a generated model per setting; from each rank's
--report and /usr/bin/time -v it prints exchange bytes and seconds per iteration, tuning wall per block,
and peak RSS per rank against the serial run's; then a projection of the exchange time for N GPU ranks
from the measured bytes. Standard library only; needs root for the namespace rows (skipped otherwise).

  bench/dist_bench.py [--build build] [--hidden 1024] [--inter 2816] [--layers 2] [--iters 20]
                      [--nsamples 16] [--seqlen 256] [--worlds 1,2,4] [--no_netns]
"""
import argparse, json, os, re, shutil, socket, subprocess, sys, tempfile, time

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def run_job(cli, world, args, work, tag, prefixes=None, addr="127.0.0.1"):
    port = free_port() if not prefixes else 29000 + os.getpid() % 500
    procs = []
    for r in range(world):
        env = dict(os.environ)
        if world > 1:
            env.update(RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(world),
                       MASTER_ADDR=addr, MASTER_PORT=str(port))
        rep = f"{work}/{tag}.r{r}.json"
        cmd = (prefixes[r] if prefixes else []) + ["/usr/bin/time", "-v", cli] + args + \
              ["--output_dir", f"{work}/{tag}.out", "--overwrite", "--report", rep, "--verbose"]
        log = open(f"{work}/{tag}.r{r}.log", "w")
        procs.append((subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    t0 = time.time()
    for p, log in procs:
        if p.wait() != 0:
            sys.exit(f"{tag}: a rank failed; see {log.name}")
    wall = time.time() - t0
    rss = []
    for r in range(world):
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(f"{work}/{tag}.r{r}.log").read())
        rss.append(int(m.group(1)) / 1024 if m else float("nan"))
    rep = json.load(open(f"{work}/{tag}.r0.json"))
    return wall, rss, rep

def summarize(tag, world, wall, rss, rep, iters, serial_rss):
    blocks = rep["blocks"]
    ex_bytes = sum(b["exchange_bytes"] for b in blocks) / len(blocks) / iters
    ex_s = sum(b["phase_seconds"].get("tune_exchange", 0) for b in blocks) / len(blocks) / iters
    tune = sum(b["phase_seconds"]["tune"] for b in blocks) / len(blocks)
    rss_s = "/".join(f"{x:.0f}" for x in rss)
    ratio = max(rss) / serial_rss if serial_rss else 1.0
    print(f"| {tag} | {world} | {ex_bytes/1e6:.2f} | {ex_s*1e3:.1f} | {tune:.2f} | {wall:.1f} | {rss_s} | {ratio:.2f} |")
    return ex_bytes, ex_s

def netns(cmds):
    return subprocess.run(" && ".join(cmds), shell=True, stderr=subprocess.DEVNULL).returncode == 0

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--inter", type=int, default=2816)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--nsamples", type=int, default=16)
    ap.add_argument("--seqlen", type=int, default=256)
    ap.add_argument("--worlds", default="1,2,4", help="process counts of the loopback rows")
    ap.add_argument("--no_netns", action="store_true", help="skip the network-namespace rows")
    a = ap.parse_args()
    cli = os.path.abspath(f"{a.build}/src/cli/autoround")
    work = tempfile.mkdtemp(prefix="dist_bench_")
    model = f"{work}/model"
    subprocess.run([f"{a.build}/bench/stream_bench", "--write", model, "--layers", str(a.layers), "--hidden",
                    str(a.hidden), "--inter", str(a.inter), "--heads", str(a.hidden // 64), "--kv_heads",
                    str(a.hidden // 128), "--vocab", "4096"], check=True, stdout=subprocess.DEVNULL)
    base = ["--model", model, "--iters", str(a.iters), "--nsamples", str(a.nsamples), "--seqlen", str(a.seqlen),
            "--bits", "4", "--group_size", "128"]
    print(f"model: {a.layers} blocks, hidden {a.hidden}, intermediate {a.inter}; {a.nsamples} x {a.seqlen} tokens, "
          f"{a.iters} iterations, W4G128; {os.cpu_count()} cores shared by every rank")
    print("| setting | processes | exchange MB/iter/rank | exchange ms/iter | tune s/block | wall s | peak RSS MiB per rank | max RSS / serial |")
    print("|---|---|---|---|---|---|---|---|")
    serial_rss, rows = None, {}
    for world in [int(w) for w in a.worlds.split(",")]:
        threads = max(1, (os.cpu_count() or 2) // world)
        wall, rss, rep = run_job(cli, world, base + ["--threads", str(threads)], work, f"loopback-{world}")
        if world == 1:
            serial_rss = rss[0]
        rows[world] = summarize(f"loopback", world, wall, rss, rep, a.iters, serial_rss)
    tagn = str(os.getpid() % 10000)
    na, nb = f"arb_a{tagn}", f"arb_b{tagn}"
    setup = [f"ip netns add {na}", f"ip netns add {nb}", f"ip link add va{tagn} type veth peer name vb{tagn}",
             f"ip link set va{tagn} netns {na}", f"ip link set vb{tagn} netns {nb}",
             f"ip -n {na} addr add 10.232.0.1/24 dev va{tagn}", f"ip -n {nb} addr add 10.232.0.2/24 dev vb{tagn}",
             f"ip -n {na} link set va{tagn} up", f"ip -n {nb} link set vb{tagn} up",
             f"ip -n {na} link set lo up", f"ip -n {nb} link set lo up"]
    teardown = f"ip netns del {na} 2>/dev/null; ip netns del {nb} 2>/dev/null"
    if not a.no_netns and netns(setup):
        try:
            for rate, delay, burst in (("100gbit", "10us", "16mb"), ("10gbit", "50us", "2mb")):
                # netem shapes rate and latency; kernels without sch_netem get tbf (rate only).
                name = f"veth {rate[:-4]} Gbit/s netem +{delay}"
                for ns, dev in ((na, f"va{tagn}"), (nb, f"vb{tagn}")):
                    q = f"ip netns exec {ns} tc qdisc replace dev {dev} root"
                    if subprocess.run(f"{q} netem rate {rate} delay {delay}", shell=True, stderr=subprocess.DEVNULL).returncode:
                        subprocess.run(f"{q} tbf rate {rate} burst {burst} latency 50ms", shell=True, check=True)
                        name = f"veth {rate[:-4]} Gbit/s tbf (no netem here)"
                prefixes = [["ip", "netns", "exec", na], ["ip", "netns", "exec", nb]]
                wall, rss, rep = run_job(cli, 2, base + ["--threads", "1"], work, "netns", prefixes, "10.232.0.1")
                summarize(name, 2, wall, rss, rep, a.iters, serial_rss)
        finally:
            subprocess.run(teardown, shell=True)
    else:
        print("(network namespaces unavailable: the veth rows need root / CAP_NET_ADMIN)")
    # Projection: per iteration a rank receives 2 (P-1)/P x 4 bytes per tuned weight (alltoall + allgather).
    b2 = rows[2][0]  # measured at P = 2: 2 (P-1)/P x 4 bytes per tuned weight = 4 bytes
    weights = b2 / 4
    print(f"\nprojection from the measured {b2/1e6:.2f} MB/iteration at 2 processes ({weights/1e6:.2f} M tuned weights per block):")
    print("| ranks | MB in per rank per iteration | at 25 GB/s (NVLink-class per-GPU share) | at 12.5 GB/s (100 Gbit/s) |")
    print("|---|---|---|---|")
    for n in (2, 4, 8, 16, 64):
        mb = 2 * (n - 1) / n * 4 * weights / 1e6
        print(f"| {n} | {mb:.2f} | {mb/25e3*1e3:.2f} ms | {mb/12.5e3*1e3:.2f} ms |")
    shutil.rmtree(work)

if __name__ == "__main__":
    main()
