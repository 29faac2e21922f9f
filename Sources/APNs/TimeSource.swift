import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Where Herald reads the wall clock: the system's, or a manual one that tests move by hand.
///
/// Herald's client (token minting, expirations, backoff deadlines) and the APNs emulator (token
/// ages, 410 timestamps) both take one, so tests can make an hour pass instantly.
public struct TimeSource: Sendable {
    private enum Clock: Sendable {
        case system
        case manual(ManualTime)
    }

    private let clock: Clock

    /// The system's real-time clock (`CLOCK_REALTIME`).
    public static let system = TimeSource(clock: .system)

    /// A clock that shows whatever `time` is set to.
    public static func manual(_ time: ManualTime) -> TimeSource {
        TimeSource(clock: .manual(time))
    }

    /// Milliseconds since the UNIX epoch.
    public func nowMilliseconds() -> Int64 {
        switch clock {
        case .system:
            var now = timespec()
            clock_gettime(CLOCK_REALTIME, &now)
            return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
        case .manual(let time):
            return time.nowMilliseconds()
        }
    }

    /// Whole seconds since the UNIX epoch, as JWT `iat` and `apns-expiration` count.
    public func nowSeconds() -> Int64 {
        let milliseconds = nowMilliseconds()
        // Floor, so that times before 1970 round the same way as after.
        return milliseconds >= 0 ? milliseconds / 1000 : (milliseconds - 999) / 1000
    }
}

/// A wall clock that moves only when told, shared between a test and the code under test.
public final class ManualTime: Sendable {
    private let milliseconds: Atomic<Int64>

    /// Starts at `milliseconds` since the UNIX epoch.
    public init(milliseconds: Int64 = 0) {
        self.milliseconds = Atomic(milliseconds)
    }

    public func nowMilliseconds() -> Int64 {
        milliseconds.load(ordering: .acquiring)
    }

    /// Moves the clock by `duration` (backwards if negative), in whole milliseconds.
    public func advance(by duration: Duration) {
        let (seconds, attoseconds) = duration.components
        milliseconds.wrappingAdd(seconds * 1000 + attoseconds / 1_000_000_000_000_000, ordering: .acquiringAndReleasing)
    }

    /// Sets the clock to `milliseconds` since the UNIX epoch.
    public func set(_ milliseconds: Int64) {
        self.milliseconds.store(milliseconds, ordering: .releasing)
    }
}
