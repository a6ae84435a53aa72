//! A TCP proxy that holds every chunk it carries for a fixed time in each direction, as a
//! database in another availability zone would (`cluster_load`). Throughput is not limited:
//! chunks are read as they come and each is written out once its own delay has passed, in
//! order, so pipelined traffic stays pipelined. The delay is tokio's timer, whose granularity
//! is a millisecond: a 1 ms delay is 1–2 ms in practice; the harness measures and prints it.
//!
//! It carries bytes only: it knows nothing of PostgreSQL.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// A running proxy; it stops when the harness exits.
pub struct DelayProxy {
    pub port: u16,
}

impl DelayProxy {
    /// Listens on 127.0.0.1 (any port) and forwards each connection to `target` with
    /// `one_way` added in each direction, on a thread of its own.
    pub fn start(target: SocketAddr, one_way: Duration) -> DelayProxy {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let port = std_listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = TcpListener::from_std(std_listener).unwrap();
                loop {
                    let Ok((inbound, _)) = listener.accept().await else {
                        continue;
                    };
                    tokio::spawn(async move {
                        let Ok(outbound) = TcpStream::connect(target).await else {
                            return;
                        };
                        let _ = inbound.set_nodelay(true);
                        let _ = outbound.set_nodelay(true);
                        let (in_r, in_w) = inbound.into_split();
                        let (out_r, out_w) = outbound.into_split();
                        tokio::spawn(carry(in_r, out_w, one_way));
                        tokio::spawn(carry(out_r, in_w, one_way));
                    });
                }
            });
        });
        DelayProxy { port }
    }
}

/// Reads chunks from `from` and writes each to `to` `delay` after it arrived.
async fn carry(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Bytes)>();
    let writer = tokio::spawn(async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let due = Instant::now() + delay;
                if tx.send((due, Bytes::copy_from_slice(&buf[..n]))).is_err() {
                    break;
                }
            }
        }
    }
    drop(tx);
    let _ = writer.await;
}
