//! A TCP proxy that holds every chunk it carries for a fixed time in each direction, as a
//! database in another availability zone would (`cluster_load`). Throughput is not limited:
//! a reader thread takes chunks as they come and a writer thread writes each one out once its
//! own delay has passed, in order, so pipelined traffic stays pipelined. Plain threads and
//! `std::thread::sleep` (tens of microseconds late), not tokio's timer, whose millisecond
//! ticks made a 1 ms delay 2 ms or more; the harness measures the round trip and prints it.
//!
//! It carries bytes only: it knows nothing of PostgreSQL.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running proxy; it stops when the harness exits.
pub struct DelayProxy {
    pub port: u16,
}

impl DelayProxy {
    /// Listens on 127.0.0.1 (any port) and forwards each connection to `target` with
    /// `one_way` added in each direction.
    pub fn start(target: SocketAddr, one_way: Duration) -> DelayProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for inbound in listener.incoming().flatten() {
                let Ok(outbound) = TcpStream::connect(target) else {
                    continue;
                };
                let _ = inbound.set_nodelay(true);
                let _ = outbound.set_nodelay(true);
                let (in2, out2) = (inbound.try_clone().unwrap(), outbound.try_clone().unwrap());
                carry(inbound, outbound, one_way);
                carry(out2, in2, one_way);
            }
        });
        DelayProxy { port }
    }
}

/// Copies `from` to `to`, each chunk `delay` after it arrived, on two threads of its own.
fn carry(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::spawn(move || {
        for (due, chunk) in rx {
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0
                || tx
                    .send((Instant::now() + delay, buf[..n].to_vec()))
                    .is_err()
            {
                break;
            }
        }
    });
}
