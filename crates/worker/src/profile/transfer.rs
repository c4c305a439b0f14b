//! The transfer curve (`p2p_us_by_bytes`): state transfers timed through parcae-net's QUIC path
//! on loopback, at the sizes a migration of the model moves.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use parcae_cluster::ModelSpec;

use super::{ProfilingError, Timings};

/// Sizes of the transfer curve for `spec`: 1 KiB and 64 KiB (latency), every distinct layer
/// state size (what a migration moves, layer by layer), and powers of 4 from 256 KiB up to the
/// whole model's state (the cost model extrapolates beyond the last point at its bandwidth).
pub fn default_transfer_sizes(spec: &ModelSpec) -> Vec<u64> {
    let full: u64 = (0..spec.num_layers()).map(|l| spec.layer_state_bytes(l)).sum();
    let mut sizes: BTreeSet<u64> = [1 << 10, 64 << 10].into_iter().collect();
    sizes.extend((0..spec.num_layers()).map(|l| spec.layer_state_bytes(l)));
    let mut s: u64 = 256 << 10;
    loop {
        sizes.insert(s);
        if s >= full {
            break;
        }
        s *= 4;
    }
    sizes.into_iter().filter(|&s| s > 0).collect()
}

/// Times state transfers of each size through parcae-net's QUIC path (`send_state` /
/// `recv_state`, the worker's default [`parcae_net::TransferOptions`]) between two endpoints
/// of a fresh cluster CA on 127.0.0.1: one untimed transfer, then `reps` timed ones per size,
/// each from the first byte sent to the receiver's verification of the last chunk. Returns
/// microseconds by size.
pub fn measure_transfer(sizes: &[u64], reps: usize) -> Result<BTreeMap<u64, Timings>, ProfilingError> {
    let err = |what: &str, e: &dyn std::fmt::Display| ProfilingError::Transfer(format!("{what}: {e}"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| err("starting the async runtime", &e))?;
    runtime.block_on(async {
        use parcae_net::{Accepted, ClusterCa, NetEndpoint, ServerMode, TransferOptions, TransportOptions};
        let ca = ClusterCa::generate("parcae-profile").map_err(|e| err("making a cluster CA", &e))?;
        let (a, b) = (
            ca.issue("profile-sender", &[]).map_err(|e| err("issuing a certificate", &e))?,
            ca.issue("profile-receiver", &[]).map_err(|e| err("issuing a certificate", &e))?,
        );
        let local: std::net::SocketAddr = ([127, 0, 0, 1], 0).into();
        let sender = NetEndpoint::bind(local, &a, ServerMode::MembersOnly, TransportOptions::default())
            .map_err(|e| err("binding", &e))?;
        let receiver = NetEndpoint::bind(local, &b, ServerMode::MembersOnly, TransportOptions::default())
            .map_err(|e| err("binding", &e))?;
        let addr = receiver.local_addr().map_err(|e| err("binding", &e))?;
        let accept = async {
            let incoming = receiver.accept().await.ok_or_else(|| err("accepting", &"endpoint closed"))?;
            match receiver.accept_incoming(incoming, None).await {
                Ok(Accepted::Peer { conn, .. }) => Ok(conn),
                Ok(other) => Err(err("accepting", &format!("{other:?}"))),
                Err(e) => Err(err("accepting", &e)),
            }
        };
        let (conn, server_conn) = tokio::join!(sender.connect(addr, "profile-receiver"), accept);
        let (conn, server_conn) = (conn.map_err(|e| err("connecting", &e))?, server_conn?);
        let opts = TransferOptions::default();
        let mut out = BTreeMap::new();
        let mut id = 0u64;
        for &size in sizes {
            let payload: Vec<u8> = (0..size).map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8).collect();
            let mut samples = Vec::with_capacity(reps);
            for rep in 0..=reps.max(1) {
                id += 1;
                let start = Instant::now();
                let (sent, received) = tokio::join!(
                    parcae_net::send_state(&conn, id, &payload, &opts),
                    parcae_net::recv_state(&server_conn, &opts)
                );
                let elapsed = start.elapsed();
                sent.map_err(|e| err("sending", &e))?;
                let (_, bytes, _) = received.map_err(|e| err("receiving", &e))?;
                if bytes.len() as u64 != size {
                    return Err(err("receiving", &format!("{} bytes arrived, {size} sent", bytes.len())));
                }
                if rep > 0 {
                    samples.push(elapsed.as_secs_f64() * 1e6);
                }
            }
            out.insert(size, Timings::new(samples));
        }
        conn.close(0u32.into(), b"done");
        sender.quinn().wait_idle().await;
        Ok(out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfer_sizes_cover_layers_and_the_whole_model() {
        let spec = ModelSpec::default();
        let sizes = default_transfer_sizes(&spec);
        let full: u64 = (0..spec.num_layers()).map(|l| spec.layer_state_bytes(l)).sum();
        assert!(sizes.windows(2).all(|w| w[0] < w[1]));
        assert!(sizes.contains(&spec.layer_state_bytes(1)) && *sizes.last().unwrap() >= full);
    }
}
