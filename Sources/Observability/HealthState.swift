import Synchronization

/// What /healthz and /readyz answer from: each worker loop stamps a heartbeat and says whether
/// it is ready (Redis reachable, not draining). Written by the loops once a second, read by the
/// metrics server: a lock taken about once a second per loop, never per notification.
public final class HealthState: Sendable {
    private let heartbeats: Mutex<[Int64]>
    private let ready: Mutex<[Bool]>
    public let loops: Int
    /// Heartbeats older than this mean the loop is stuck.
    public let staleAfterMilliseconds: Int64

    public init(loops: Int, staleAfterMilliseconds: Int64 = 5_000) {
        heartbeats = Mutex(Array(repeating: 0, count: loops))
        ready = Mutex(Array(repeating: false, count: loops))
        self.loops = loops
        self.staleAfterMilliseconds = staleAfterMilliseconds
    }

    public func beat(loop: Int, now: Int64) {
        heartbeats.withLock { $0[loop] = now }
    }

    public func setReady(loop: Int, _ value: Bool) {
        ready.withLock { $0[loop] = value }
    }

    /// Every loop turned recently.
    public func isLive(now: Int64) -> (Bool, String) {
        let beats = heartbeats.withLock { $0 }
        for index in beats.indices {
            let last = beats[index]
            if now - last > staleAfterMilliseconds {
                return (false, "event loop \(index) has not turned for \(last == 0 ? "ever" : "\(now - last) ms")")
            }
        }
        return (true, "ok")
    }

    /// Every loop is ready.
    public func isReady() -> (Bool, String) {
        let flags = ready.withLock { $0 }
        for index in flags.indices where !flags[index] {
            return (false, "worker loop \(index) is not ready (Redis unreachable, draining, or starting)")
        }
        return (true, "ok")
    }
}
