//! Ports for the processes a test starts (shared by the `it` and `console` tests).

use std::net::TcpListener;

/// A port that was free a moment ago, for a server to be told to listen on. It is taken
/// below the kernel's ephemeral range (`ip_local_port_range`): a port from that range
/// could be handed, before the server binds it, to any listener on port 0 or any
/// outgoing connection of the tests running beside this one.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static DRAWS: AtomicU64 = AtomicU64::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    const FLOOR: u16 = 10_000;
    if low > FLOOR + 1_000 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let mut x = u64::from(std::process::id()) << 32
            ^ u64::from(nanos)
            ^ DRAWS
                .fetch_add(1, Ordering::Relaxed)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for _ in 0..1_000 {
            // xorshift64: spread over the span below the ephemeral range.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let port = FLOOR + u16::try_from(x % u64::from(low - FLOOR)).unwrap_or(0);
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}
