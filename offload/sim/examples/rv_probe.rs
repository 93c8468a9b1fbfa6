// Scratch probe (not committed): sim time of back-to-back allreduces at two sizes.
use ringcast_abi::*;
use ringcast_proto::comm::World;
use ringcast_proto::config::LocalRank;
use ringcast_proto::intake::regions::SegmentHandle;
use ringcast_proto::rng::SimRng;
use ringcast_sim::cluster::{world_engines, Cluster, DmaTiming};
use ringcast_sim::fabric::Faults;

fn main() {
    let slots: u32 = std::env::args().nth(1).map(|s| s.parse().unwrap()).unwrap_or(16);
    for len in [3904usize, 4096, 8192] {
        let (nodes, ppn) = (2u32, 2u32);
        let engines =
            world_engines(&World::Uniform { nodes, ppn }, "probe", &|c| c.protocol.preposted_slots = slots);
        let mut c = Cluster::new(
            engines,
            Faults::clean(),
            SimRng::new(1),
            crc32c::crc32c,
            DmaTiming::Now,
            SimRng::new(2),
        );
        let size = nodes * ppn;
        let total = (len * size as usize) as u64;
        let mut hosts = Vec::new();
        for r in 0..size {
            let (node, local) = ((r / ppn) as usize, r % ppn);
            let m = &mut c.nodes[node];
            let host = m.engine.attach_host(LocalRank::Fixed(local), 0).unwrap();
            m.engine.host_arrived(host);
            m.mem.insert(u64::from(local) << 48, vec![1u8; total as usize]);
            let wk = m
                .engine
                .register(host, SegmentHandle(u64::from(local) << 48), total, 0, total, Access::READ_WRITE)
                .unwrap();
            hosts.push((node, host, wk));
        }
        let iters = 20;
        let t0 = c.now();
        for it in 0..iters {
            for r in 0..size {
                let (node, host, wk) = hosts[r as usize];
                let d = SubmissionDescriptor::allreduce(
                    it << 8 | u64::from(r),
                    0,
                    RegionRef { key: wk, offset: 0 },
                    None,
                    len as u64,
                    DataType::U64,
                    ReduceOp::SUM,
                );
                c.with_engine(node, |e, now| e.handle_descriptor(host, &d, now));
            }
            let want = ((it + 1) * u64::from(size)) as usize;
            while c.published().len() < want {
                if c.step().is_none() {
                    break;
                }
            }
        }
        println!(
            "slots {slots} len {len}: {:.1} us per allreduce (sim)",
            (c.now() - t0) as f64 / iters as f64 / 1000.0
        );
    }
}
