//! The worker process's runtime around the training core: the peer-to-peer
//! plane over QUIC, the mailbox it fills, the links the trainer uses, and the
//! driver that carries out the host's commands (training), and the serving state those
//! commands drive when the host serves instead (`serve`).

pub mod driver;
pub mod links;
pub mod mailbox;
pub mod peers;
pub mod serve;
