#!/usr/bin/env python3
"""Write the StarPU 1.4 bus model files of a fake GPU node, for simulation.

StarPU's simulation takes each node's devices and links from the bus model
files of the machine STARPU_HOSTNAME names (config, affinity, latency,
bandwidth, platform.v4.xml: what a real run's bus calibration writes, "fake
machines" in StarPU's documentation). This writes them for a node of NCPU
CPU cores in one NUMA node and NGPU GPUs, from stated link figures, into
SAMPLING/bus/NAME.*:

  platforms/make_node.py SAMPLING NAME --cpus 40 --gpus 4 --gpu-model 'Tesla V100-SXM2-16GB'
      --gpu-mem-gib 16 --h2d-gbps 75 --h2d-lat-us 5 --p2p-gbps 75 --p2p-lat-us 5
      --ram-gbps 170

(GB/s = 1e9 bytes/s, per direction; every GPU pair has its own link, or with
--nvswitch every GPU one link out and one in through a switch, shared by all
its peers: an NVLink switch as in 8-GPU H100 nodes, where a GPU's 450 GB/s per
direction is its total to all others, not per pair.)

  platforms/make_node.py SAMPLING h100x8 --cpus 112 --gpus 8 --nvswitch
      --gpu-model 'NVIDIA H100 80GB HBM3' --gpu-mem-gib 80 --h2d-gbps 55
      --p2p-gbps 450 --p2p-lat-us 2 --ram-gbps 300
"""
import argparse
import os

MAXNODES = 16  # the matrices' width in StarPU's files (nan beyond the nodes)


def matrix(n, val):
    rows = []
    for i in range(MAXNODES):
        rows.append("\t".join(
            ("%e" % val(i, j) if i < n and j < n else "nan") for j in range(MAXNODES)))
    return "\n".join(rows) + "\n"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("sampling")
    p.add_argument("name")
    p.add_argument("--cpus", type=int, required=True)
    p.add_argument("--gpus", type=int, required=True)
    p.add_argument("--gpu-model", default="GPU")
    p.add_argument("--gpu-mem-gib", type=float, required=True)
    p.add_argument("--h2d-gbps", type=float, required=True)
    p.add_argument("--h2d-lat-us", type=float, default=5.0)
    p.add_argument("--p2p-gbps", type=float, required=True)
    p.add_argument("--p2p-lat-us", type=float, default=5.0)
    p.add_argument("--ram-gbps", type=float, required=True)
    p.add_argument("--nvswitch", action="store_true",
                   help="GPU-GPU traffic through one link out and one in per GPU")
    a = p.parse_args()
    d = os.path.join(a.sampling, "bus")
    os.makedirs(d, exist_ok=True)
    base = os.path.join(d, a.name)
    n = 1 + a.gpus  # memory nodes: NUMA0, then CUDA0..
    with open(base + ".config", "w") as f:
        f.write("# Current configuration\n%d # Number of CPUs\n1 # Number of NUMA nodes\n"
                "%d # Number of CUDA nodes\n" % (a.cpus, a.gpus))
        for what in ["OpenCL", "FPGA", "Disk", "MPI_MS", "TCPIP_MS", "HIP"]:
            f.write("0 # Number of %s nodes\n" % what)
    with open(base + ".affinity", "w") as f:
        f.write("# GPU\tNUMA0\t\n")
        for g in range(a.gpus):
            f.write("%d\t0\t\n" % g)
    # bandwidth in MB/s (1e6 bytes/s), latency in us; node 0 is the RAM
    def bw(i, j):
        if i == j:
            return 0.0
        return (a.h2d_gbps if i == 0 or j == 0 else a.p2p_gbps) * 1e3

    def lat(i, j):
        if i == j:
            return 0.0
        return a.h2d_lat_us if i == 0 or j == 0 else a.p2p_lat_us
    head = "# to NUMA 0\t" + "".join("to CUDA %d\t" % g for g in range(a.gpus)) + "\n"
    with open(base + ".bandwidth", "w") as f:
        f.write(head + matrix(n, bw))
    with open(base + ".latency", "w") as f:
        f.write(head + matrix(n, lat))
    mem = int(a.gpu_mem_gib * (1 << 30))
    for version, fname in [(4, ".platform.v4.xml"), (3, ".platform.xml")]:
        with open(base + fname, "w") as f:
            if version == 4:
                f.write("<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM "
                        "'http://simgrid.gforge.inria.fr/simgrid/simgrid.dtd'>\n"
                        ' <platform version="4">\n')
            else:
                f.write("<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM "
                        "'http://simgrid.gforge.inria.fr/simgrid.dtd'>\n"
                        ' <platform version="3">\n')
            f.write(' <config id="General">\n'
                    '   <prop id="network/TCP-gamma" value="-1"></prop>\n'
                    '   <prop id="network/latency-factor" value="1"></prop>\n'
                    '   <prop id="network/bandwidth-factor" value="1"></prop>\n'
                    '   <prop id="network/crosstraffic" value="0"></prop>\n'
                    '   <prop id="network/weight-S" value="0.0"></prop>\n'
                    ' </config>\n <AS  id="AS0"  routing="Full">\n'
                    '   <host id="MAIN" speed="1f"/>\n')
            for c in range(a.cpus):
                f.write('   <host id="CPU%d" speed="2000000000f"/>\n' % c)
            for g in range(a.gpus):
                f.write('   <host id="CUDA%d" speed="2000000000f">\n'
                        '     <prop id="model" value="%s"/>\n'
                        '     <prop id="memsize" value="%d"/>\n'
                        '     <prop id="memcpy_peer" value="1"/>\n'
                        '   </host>\n' % (g, a.gpu_model, mem))
            f.write('\n   <host id="RAM" speed="1f"/>\n')
            f.write('   <link id="NUMA0" bandwidth="%fBps" latency="0.000000s"/>\n'
                    % (a.ram_gbps * 1e9))
            f.write('   <link id="Interconnect" bandwidth="%fBps" latency="0.000000s"/>\n\n'
                    % (a.ram_gbps * 1e9))
            for g in range(a.gpus):
                for src, dst in [("RAM", "CUDA%d" % g), ("CUDA%d" % g, "RAM")]:
                    f.write('   <link id="%s-%s" bandwidth="%fBps" latency="%fs"/>\n'
                            % (src, dst, a.h2d_gbps * 1e9, a.h2d_lat_us * 1e-6))
            if a.nvswitch:  # half the latency on each side of the switch
                for g in range(a.gpus):
                    for d in ["out", "in"]:
                        f.write('   <link id="CUDA%d-nvs-%s" bandwidth="%fBps" latency="%fs"/>\n'
                                % (g, d, a.p2p_gbps * 1e9, a.p2p_lat_us * 0.5e-6))
            else:
                for i in range(a.gpus):
                    for j in range(a.gpus):
                        if i != j:
                            f.write('   <link id="CUDA%d-CUDA%d" bandwidth="%fBps" latency="%fs"/>\n'
                                    % (i, j, a.p2p_gbps * 1e9, a.p2p_lat_us * 1e-6))
            for i in range(a.gpus):
                for j in range(a.gpus):
                    if i != j and a.nvswitch:
                        f.write('   <route src="CUDA%d" dst="CUDA%d" symmetrical="NO">\n'
                                '    <link_ctn id="CUDA%d-nvs-out"/>\n'
                                '    <link_ctn id="CUDA%d-nvs-in"/>\n   </route>\n'
                                % (i, j, i, j))
                    elif i != j:
                        f.write('   <route src="CUDA%d" dst="CUDA%d" symmetrical="NO">\n'
                                '    <link_ctn id="CUDA%d-CUDA%d"/>\n   </route>\n'
                                % (i, j, i, j))
                f.write('   <route src="CUDA%d" dst="RAM" symmetrical="NO">\n'
                        '    <link_ctn id="CUDA%d-RAM"/>\n    <link_ctn id="NUMA0"/>\n'
                        '   </route>\n' % (i, i))
                f.write('   <route src="RAM" dst="CUDA%d" symmetrical="NO">\n'
                        '    <link_ctn id="RAM-CUDA%d"/>\n    <link_ctn id="NUMA0"/>\n'
                        '   </route>\n' % (i, i))
            f.write(" </AS>\n </platform>\n")


if __name__ == "__main__":
    main()
