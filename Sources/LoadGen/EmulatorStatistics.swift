import APNs

/// The counts the load generator needs from the emulator's stats JSON (`GET /_herald/stats`):
/// accepted (unique apns-ids), duplicates, rejections, and the latency summary when it measures.
public struct EmulatorStatistics: Sendable, Equatable {
    public var accepted = 0
    public var acceptedUnique = 0
    public var duplicates = 0
    public var rejectedTotal = 0
    public var connections = 0
    public var goAwaysSent = 0
    public var latency: LatencyPercentiles? = nil
    /// From the payloads' schedule stamps (steady mode): `latency` plus the producer's lateness.
    public var latencyFromSchedule: LatencyPercentiles? = nil

    public init() {}

    /// Reads the stats JSON; nil when it is not the emulator's.
    public init?(json: [UInt8]) {
        let parsed: EmulatorStatistics? = json.withUnsafeBufferPointer { bytes in
            let scanner = JSONScanner(bytes)
            guard (try? scanner.validate()) != nil, let unique = scanner.rootMember("accepted_unique").flatMap(scanner.int64) else { return nil }
            var stats = EmulatorStatistics()
            func int(_ name: StaticString) -> Int { Int(scanner.rootMember(name).flatMap(scanner.int64) ?? 0) }
            stats.acceptedUnique = Int(unique)
            stats.accepted = int("accepted")
            stats.duplicates = int("duplicates")
            stats.rejectedTotal = int("rejected_total")
            stats.connections = int("connections")
            stats.goAwaysSent = int("goaways_sent")
            if let latency = scanner.rootMember("latency") { stats.latency = LatencyPercentiles(scanner: scanner, object: latency) }
            if let latency = scanner.rootMember("latency_from_schedule") {
                stats.latencyFromSchedule = LatencyPercentiles(scanner: scanner, object: latency)
            }
            return stats
        }
        guard let parsed else { return nil }
        self = parsed
    }

    /// What happened between `baseline` and now (an attached emulator counts earlier runs too).
    public func since(_ baseline: EmulatorStatistics) -> EmulatorStatistics {
        var delta = self
        delta.accepted -= baseline.accepted
        delta.acceptedUnique -= baseline.acceptedUnique
        delta.duplicates -= baseline.duplicates
        delta.rejectedTotal -= baseline.rejectedTotal
        delta.connections -= baseline.connections
        delta.goAwaysSent -= baseline.goAwaysSent
        return delta
    }
}

/// Sums of worker counters read from Prometheus text (`/metrics`).
public enum PrometheusScrape {
    /// The sum of every sample of `metric` whose labels include all of `labels` (`name="value"`).
    public static func sum(_ text: String, metric: String, labels: [String] = []) -> Double {
        var total = 0.0
        for line in text.split(separator: "\n") where line.hasPrefix(metric) && !line.hasPrefix("#") {
            let rest = line.dropFirst(metric.count)
            guard rest.first == "{" || rest.first == " " else { continue }
            if !labels.allSatisfy({ rest.contains($0) }) { continue }
            guard let space = rest.lastIndex(of: " "), let value = Double(rest[rest.index(after: space)...]) else { continue }
            total += value
        }
        return total
    }
}
