import Queue

/// Apps with a broadcast host (`broadcast_host`, `--apns-broadcast-host`): Apple's pages disagree
/// on where Live Activity broadcasts go (the push host, or `api-broadcast.push.apple.com`), so
/// the host is a setting. With one, the app's broadcast jobs wait and are sent on a lane of their
/// own, whose pool (one connection, the app's credentials) talks to that host; the app's device
/// pushes never wait behind it, and a broadcast host that is down or refuses the credentials
/// halts only that lane. Counters, dead letters, feedback and receipts stay the app's: a
/// job's record keeps its app lane, only the line it waits in changes.
extension DeliveryRules {
    /// The line `job` (read for app lane `lane`) waits in: its app's broadcast lane for a
    /// broadcast when the app has one, else the app lane itself.
    func admittedLane(_ job: Job, lane: Int) -> Int {
        guard !broadcastLanes.isEmpty, job.template.isBroadcast, let broadcast = broadcastLanes[lane] else { return lane }
        return broadcast
    }

    /// The broadcast lane of `lane`'s app, when it has a broadcast host.
    public func broadcastLane(of lane: Int) -> Int? { broadcastLanes[lane] }
}
