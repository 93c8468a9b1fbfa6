//! The world communicator, job by job: its identity in each job a daemon serves
//! ([`world_identity`], [`world_identity_of`]) and how one is built ([`WorldRecipe`]);
//! `world_jobs.rs` says when the next job starts.
use crate::comm::ident::{derived_identity, CommIdentity};
use crate::comm::links::LinkSet;
use crate::comm::{CommSpec, PeerId, World};
use crate::config::JobSecret;
use crate::engine::links::Links;
use crate::engine::node::comms::LocalComm;
use crate::transfer::protocol::Protocol;
use alloc::format;
use alloc::sync::Arc;
use ringcast_abi::StatusKind;

/// The world communicator's identity, the same at every engine of `job`; its frames are keyed
/// by `secret` (the job's, `RINGCAST_JOB_SECRET`).
pub fn world_identity(job: &str, secret: &JobSecret) -> CommIdentity {
    derived_identity(&format!("ringcast world communicator of job {job}"), secret.0.as_ref())
}

/// The world communicator's identity in job `generation` of `job` (0: the first job, the
/// identity [`world_identity`] names; later ones keep its multicast group).
pub fn world_identity_of(job: &str, secret: &JobSecret, generation: u64) -> CommIdentity {
    let first = world_identity(job, secret);
    if generation == 0 {
        return first;
    }
    let name = format!("ringcast world communicator of job {job}, generation {generation}");
    CommIdentity { group: first.group, ..derived_identity(&name, secret.0.as_ref()) }
}

/// What building a world communicator needs, kept by the node for the next job.
#[derive(Clone, Debug)]
pub(crate) struct WorldRecipe {
    pub(crate) job: alloc::string::String,
    pub(crate) secret: JobSecret,
    pub(crate) node: u32,
    pub(crate) world: World,
    pub(crate) link_set: LinkSet,
    pub(crate) window: usize,
    /// Jobs started on this engine before the current one.
    pub(crate) generation: u64,
}

impl WorldRecipe {
    /// The world communicator of the current generation: its protocol side and links created
    /// in `proto`.
    pub(crate) fn build(&self, proto: &mut Protocol) -> Result<LocalComm, StatusKind> {
        let id = world_identity_of(&self.job, &self.secret, self.generation);
        let engines: Arc<[PeerId]> = (0..self.world.nodes()).map(PeerId).collect();
        let spec = CommSpec {
            cookie: id.cookie,
            group: id.group,
            members: engines.clone(),
            my_rank: self.node,
            seed: id.seed,
            key: id.key,
            layout: Default::default(),
        };
        let handle = proto.create_comm(spec)?;
        let parent = match self.generation {
            0 => format!("job {}", self.job),
            g => format!("job {} generation {g}", self.job),
        };
        let links = Links::new(&parent, &id.key, &engines, self.node, self.link_set, proto);
        Ok(LocalComm::world(self.node, &self.world, handle, id.group, self.window, links))
    }
}
