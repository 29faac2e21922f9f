import APNs
import Queue

/// Payloads of an exact size that carry their enqueue time: valid JSON such as
/// `{"aps":{"alert":"Herald loadgen"},"t":1763830000000000,"s":1763829999999000,"pad":"xxxx"}`,
/// where `t` is when the job's XADD was queued and `s` (steady mode only) when it was due by the
/// producer's schedule, both µs since the epoch (the emulator's `--measure-latency` reads them),
/// and `pad` fills the rest.
public enum PayloadFactory {
    /// The `aps` dictionary a push type needs to pass APNs' rules.
    static func aps(for type: PushType) -> StaticString {
        switch type {
        case .background: return #"{"content-available":1}"#
        default: return #"{"alert":"Herald loadgen"}"#
        }
    }

    /// The payload for `type` stamped `stampMicros` (and `scheduledMicros` when given), padded to
    /// exactly `bytes` bytes (at least `minimumBytes(for:)`; a shorter request gets the minimum).
    ///
    /// Written as bytes into one array of the final size: the producer makes one per job, on the
    /// same cores as the worker it measures. Built by String interpolation it cost four
    /// allocations and two integer-to-text conversions per job.
    public static func payload(type: PushType, stampMicros: Int64, scheduledMicros: Int64? = nil, bytes: Int) -> [UInt8] {
        var text: [UInt8] = []
        text.reserveCapacity(max(bytes, 96))
        func append(_ string: StaticString) {
            string.withUTF8Buffer { text.append(contentsOf: $0) }
        }
        func append(_ value: Int64) {
            if value < 0 { text.append(UInt8(ascii: "-")) }
            DecimalDigits.with(value.magnitude) { text.append(contentsOf: $0) }
        }
        append(#"{"aps":"#)
        append(aps(for: type))
        append(#","t":"#)
        append(stampMicros)
        if let scheduledMicros {
            append(#","s":"#)
            append(scheduledMicros)
        }
        append(#","pad":""#)
        let padding = max(0, bytes - text.count - 2)
        text.append(contentsOf: repeatElement(UInt8(ascii: "x"), count: padding))
        text.append(UInt8(ascii: "\""))
        text.append(UInt8(ascii: "}"))
        return text
    }

    /// The smallest payload for `type` (with both 16-digit stamps and an empty pad), in either mode.
    public static func minimumBytes(for type: PushType) -> Int {
        payload(type: type, stampMicros: 1_000_000_000_000_000, scheduledMicros: 1_000_000_000_000_000, bytes: 0).count
    }

    static func isHexDigit(_ byte: UInt8) -> Bool {
        (0x30...0x39).contains(byte) || (0x61...0x66).contains(byte) || (0x41...0x46).contains(byte)
    }
}

/// The jobs of one run, job by job: tokens (fan-out), collapse ids, push types and stamped payloads.
///
/// Deterministic for a seed. Called in index order by the `Enqueuer` on its loop (a collapsing job
/// reuses the chain of the job before it). Tokens are 64 hex digits; with an unregistered prefix,
/// a share of them start with it and no other does.
public final class JobFactory {
    public let configuration: LoadGenConfiguration
    private let tokens: [[UInt8]]
    private var previousRoot = 0
    // What `fields` reads per job, copied out of `configuration`: reading members of the stored
    // struct retained its references (strings, arrays) for each job.
    private let seed: UInt64
    private let collapseRatio: Double
    private let fanout: Int
    private let payloadBytes: Int
    private let shares: [(type: PushType, share: Double)]
    /// The only push type when the mix has one (the default): no draw per job.
    private let onlyType: PushType?

    public init(configuration: LoadGenConfiguration) {
        self.configuration = configuration
        tokens = JobFactory.makeTokens(configuration)
        seed = configuration.seed
        collapseRatio = configuration.collapseRatio
        fanout = configuration.fanout
        payloadBytes = configuration.payloadBytes
        shares = configuration.pushTypes.shares
        onlyType = shares.count == 1 ? shares[0].type : nil
    }

    /// Token `index` of the run's `configuration.tokens`.
    public func token(_ index: Int) -> String { String(decoding: tokens[index % tokens.count], as: UTF8.self) }

    static func makeTokens(_ configuration: LoadGenConfiguration) -> [[UInt8]] {
        let prefix = configuration.unregisteredPrefix?.lowercased()
        let deadCount = prefix == nil ? 0 : Int((Double(configuration.tokens) * configuration.unregisteredShare).rounded())
        // Live tokens start with a digit the prefix does not.
        let liveLead: String = prefix?.first == "a" ? "b" : "a"
        var result: [[UInt8]] = []
        result.reserveCapacity(configuration.tokens)
        for index in 0..<configuration.tokens {
            var generator = SplitMix64(seed: configuration.seed &+ UInt64(index) &* 0x9E37_79B9_7F4A_7C15)
            var hex = ""
            while hex.count < 64 {
                let word = String(generator.next(), radix: 16)
                hex += String(repeating: "0", count: 16 - word.count) + word
            }
            // Distinct by construction: the last 8 digits are the index.
            let indexHex = String(index, radix: 16)
            let tail = String(repeating: "0", count: max(0, 8 - indexHex.count)) + indexHex
            let lead = index < deadCount ? prefix! : liveLead
            let middle = hex.prefix(64 - lead.count - 8)
            result.append(Array((lead + middle + tail.suffix(8)).utf8))
        }
        // Spread the dead ones through the run instead of the first jobs.
        var generator = SplitMix64(seed: configuration.seed)
        result.shuffle(using: &generator)
        return result
    }

    /// The fields of job `index`, stamped `stampMicros` (when its XADD is queued; 0: not measured) and,
    /// in steady mode, `scheduledMicros` (when it was due).
    public func fields(job index: Int, stampMicros: Int64, scheduledMicros: Int64? = nil) -> Enqueuer.Fields {
        let draw = collapseRatio > 0 ? JobFactory.draw(seed: seed, index: index, salt: 1) : 1
        let root = index > 0 && draw < collapseRatio ? previousRoot : index
        previousRoot = root
        let type = onlyType ?? PushTypeMix.type(forDraw: JobFactory.draw(seed: seed, index: index, salt: 2), shares: shares)
        var fields: Enqueuer.Fields = []
        fields.reserveCapacity(5)
        if fanout == 1 {
            fields.append((JobField.token, tokens[root % tokens.count]))
        } else {
            var joined: [UInt8] = []
            joined.reserveCapacity(fanout * 65)
            for k in 0..<fanout {
                if k > 0 { joined.append(UInt8(ascii: ",")) }
                joined.append(contentsOf: tokens[(root * fanout + k) % tokens.count])
            }
            fields.append((JobField.tokens, joined))
        }
        fields.append((JobField.payload, PayloadFactory.payload(type: type, stampMicros: stampMicros, scheduledMicros: scheduledMicros,
                                                                   bytes: payloadBytes)))
        if type != .alert { fields.append((JobField.pushType, Array(type.rawValue.utf8))) }
        if type == .background { fields.append((JobField.priority, Array("5".utf8))) }
        if collapseRatio > 0 { fields.append((JobField.collapseID, Array("c\(root)".utf8))) }
        return fields
    }

    /// A uniform draw in 0..<1 for job `index`, independent per `salt`.
    static func draw(seed: UInt64, index: Int, salt: UInt64) -> Double {
        var generator = SplitMix64(seed: seed ^ (UInt64(index) &* 0xD1B5_4A32_D192_ED03) ^ (salt &* 0x8CB9_2BA7_2F3D_8DD7))
        return Double(generator.next() >> 11) / Double(1 << 53)
    }
}
