//! Communicator identity: the 112-bit multicast group id, the 64-bit cookie every frame carries
//! and the seed of the randomized root delay, drawn at communicator creation (docs/design.md §3.1,
//! Hoefler et al. §3.1).
//!
//! One member draws them (rank 0, during the communicator's bootstrap) and the others receive
//! them with the membership. The generator is ChaCha20 keyed with SHA-256 over every entropy
//! source the paper names — time, host identity, process identity, an intra-node unique value
//! (for processes sharing a node) — and OS entropy, so a weak or repeated OS source alone cannot
//! make two jobs collide. On IP fabrics the group id maps to an IPv6 `ff15::/16` group (a
//! transient, site-local multicast address: 16 bits of prefix + the 112 bits), with an IPv4
//! `239/8` (organization-local) fallback; the cookie still drops another job's frames should two
//! groups collide.
//!
//! The identity includes the communicator's **secret** (32 bytes from the same generator): it
//! keys every frame's tag and the message MAC ([`super::auth`]), travels with the identity to
//! the members (a `COMM_CREATE` record, an `MPI_Bcast` of the interposer), never on the fabric.
//! Communicators every engine must derive without a bootstrap exchange (the world, test
//! communicators named by a string) take their identity from [`derived_identity`]: the name
//! gives cookie, group and seed, and the job's secret keys the frames.
use super::auth::Secret;
use super::GroupId;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use sha2::{Digest, Sha256};

/// What identifies a communicator on the fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CommIdentity {
    /// Multicast group (112 bits).
    pub group: GroupId,
    /// In every frame header; never 0.
    pub cookie: u64,
    /// Agreed seed (randomized root delay).
    pub seed: u64,
    /// The communicator's secret (keys frame tags and message MACs).
    pub key: Secret,
}

/// A generator of communicator identities: ChaCha20 from a 32-byte seed. The state machine is
/// handed its seed; whoever creates it gathers the entropy (the engine crate's `entropy`
/// module: OS randomness, time, host and process identity).
#[derive(Clone, Debug)]
pub struct IdentityGenerator(ChaCha20Rng);

impl IdentityGenerator {
    /// A generator keyed with `seed`.
    pub fn from_seed(seed: [u8; 32]) -> Self {
        IdentityGenerator(ChaCha20Rng::from_seed(seed))
    }

    /// Draws the next identity.
    pub fn next_identity(&mut self) -> CommIdentity {
        let rng = &mut self.0;
        let mut group = [0u8; 14];
        rng.fill_bytes(&mut group);
        let (cookie, seed) = (rng.next_u64() | 1, rng.next_u64());
        let mut key = [0u8; 32];
        rng.fill_bytes(&mut key);
        CommIdentity { group, cookie, seed, key: Secret(key) }
    }
}

/// The identity every holder of `name` derives alone (the world communicator of a job, test
/// communicators named by a string): cookie, group and seed from a hash of `name`; the secret
/// keyed by `job_secret` when given. Without a job secret the key follows from the name alone,
/// so anyone who knows the name can forge the communicator's frames: the engine warns.
pub fn derived_identity(name: &str, job_secret: Option<&[u8; 32]>) -> CommIdentity {
    let h = Sha256::digest(name.as_bytes());
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&h[i..i + 8]);
        u64::from_le_bytes(w)
    };
    let mut group: GroupId = [0; 14];
    group.copy_from_slice(&h[16..30]);
    let mut k = blake3::Hasher::new_derive_key("ringcast 2026 derived communicator secret");
    k.update(job_secret.map_or(&[0u8; 32][..], |s| &s[..]));
    k.update(name.as_bytes());
    CommIdentity { group, cookie: word(0) | 1, seed: word(8), key: Secret(*k.finalize().as_bytes()) }
}

/// The IPv6 multicast group of `group`: `ff15::/16` + the 112 bits.
pub fn group_ipv6(group: &GroupId) -> Ipv6Addr {
    let mut b = [0u8; 16];
    b[0] = 0xff;
    b[1] = 0x15;
    b[2..].copy_from_slice(group);
    Ipv6Addr::from(b)
}

/// The IPv4 fallback: `239.x.y.z` from a hash of the 112 bits (collisions are possible in 24
/// bits; the cookie keeps jobs apart).
pub fn group_ipv4(group: &GroupId) -> Ipv4Addr {
    let d = Sha256::digest(group);
    Ipv4Addr::new(239, d[0], d[1], d[2])
}

/// Address family of a fabric (every member and the groups).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IpFamily {
    /// IPv6; groups `ff15::/16` + the 112-bit group id. The default: the whole id fits, so two
    /// communicators never share a group.
    #[default]
    V6,
    /// IPv4 fallback; groups `239.x.y.z` from a hash of the id (24 bits: collisions possible,
    /// the frame cookie keeps jobs apart).
    V4,
}

impl IpFamily {
    /// The family of `ip`.
    pub fn of(ip: IpAddr) -> IpFamily {
        match ip {
            IpAddr::V4(_) => IpFamily::V4,
            IpAddr::V6(_) => IpFamily::V6,
        }
    }
}

/// The IP multicast group of `group` in `family` (what the `udp` fabric joins, and the `verbs`
/// fabric through rdmacm).
pub fn group_ip(group: &GroupId, family: IpFamily) -> IpAddr {
    match family {
        IpFamily::V6 => IpAddr::V6(group_ipv6(group)),
        IpFamily::V4 => IpAddr::V4(group_ipv4(group)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::vec::Vec;

    #[test]
    fn identities_are_distinct_and_well_formed() {
        let mut g = IdentityGenerator::from_seed([7; 32]);
        let ids: Vec<CommIdentity> = (0..10_000).map(|_| g.next_identity()).collect();
        assert_eq!(ids.iter().map(|i| i.group).collect::<HashSet<_>>().len(), ids.len());
        assert_eq!(ids.iter().map(|i| i.cookie).collect::<HashSet<_>>().len(), ids.len());
        assert!(ids.iter().all(|i| i.cookie != 0));
        assert_eq!(ids.iter().map(|i| i.key).collect::<HashSet<_>>().len(), ids.len());
        // 112 random bits: every byte position takes many values.
        for pos in 0..14 {
            assert!(ids.iter().map(|i| i.group[pos]).collect::<HashSet<_>>().len() > 200);
        }
    }

    #[test]
    fn derived_identities_depend_on_the_name_and_their_key_on_the_job_secret() {
        let a = derived_identity("job a", None);
        assert_eq!(a, derived_identity("job a", None), "every engine derives the same");
        let b = derived_identity("job b", None);
        assert_ne!((a.cookie, a.group, a.key), (b.cookie, b.group, b.key));
        let s = derived_identity("job a", Some(&[5; 32]));
        assert_eq!((s.cookie, s.group, s.seed), (a.cookie, a.group, a.seed), "the name gives the identity");
        assert_ne!(s.key, a.key, "the job secret keys it");
        assert_ne!(s.key, derived_identity("job a", Some(&[6; 32])).key);
    }

    #[test]
    fn a_seed_replays_its_identities_and_another_seed_does_not() {
        let draw = |s| IdentityGenerator::from_seed(s).next_identity();
        assert_eq!(draw([1; 32]), draw([1; 32]));
        assert_ne!(draw([1; 32]), draw([2; 32]));
    }

    #[test]
    fn ip_mappings() {
        let g: GroupId = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14];
        let v6 = group_ipv6(&g);
        assert!(v6.is_multicast());
        assert_eq!(v6.segments()[0], 0xff15);
        assert_eq!(&v6.octets()[2..], &g);
        let v4 = group_ipv4(&g);
        assert!(v4.is_multicast());
        assert_eq!(v4.octets()[0], 239);
        assert_eq!(group_ipv4(&g), v4, "deterministic");
    }
}
