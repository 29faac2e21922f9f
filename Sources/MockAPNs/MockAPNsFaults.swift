/// The HTTP/2 error codes an injected RST_STREAM may carry, by their names in the HTTP/2 spec.
public enum HTTP2ErrorCode {
    static let names: [(name: String, code: UInt32)] = [
        ("NO_ERROR", 0x0), ("PROTOCOL_ERROR", 0x1), ("INTERNAL_ERROR", 0x2), ("FLOW_CONTROL_ERROR", 0x3),
        ("SETTINGS_TIMEOUT", 0x4), ("STREAM_CLOSED", 0x5), ("FRAME_SIZE_ERROR", 0x6), ("REFUSED_STREAM", 0x7),
        ("CANCEL", 0x8), ("COMPRESSION_ERROR", 0x9), ("CONNECT_ERROR", 0xA), ("ENHANCE_YOUR_CALM", 0xB),
        ("INADEQUATE_SECURITY", 0xC), ("HTTP_1_1_REQUIRED", 0xD),
    ]

    /// A name (`REFUSED_STREAM`, any case) or a number (`7`, `0x7`).
    public static func parse(_ text: some StringProtocol) -> UInt32? {
        let upper = text.uppercased()
        if let known = names.first(where: { $0.name == upper }) { return known.code }
        if upper.hasPrefix("0X") { return UInt32(upper.dropFirst(2), radix: 16) }
        return UInt32(upper)
    }

    /// The spec's name for `code`, or its number.
    public static func name(_ code: UInt32) -> String {
        names.first(where: { $0.code == code })?.name ?? String(code)
    }
}

/// Reads a share from 0 to 1.
private func parseRate(_ text: some StringProtocol) -> Double? {
    guard let rate = Double(text), (0...1).contains(rate) else { return nil }
    return rate
}

/// Answer a share `rate` of streams with RST_STREAM `errorCode` instead of a response.
public struct InjectedReset: Sendable, Equatable, CustomStringConvertible {
    public var errorCode: UInt32
    public var rate: Double

    public init(errorCode: UInt32, rate: Double) {
        self.errorCode = errorCode
        self.rate = rate
    }

    /// Parses `CODE:RATE`, e.g. `REFUSED_STREAM:0.1` or `2:0.5`.
    public init?(argument: some StringProtocol) {
        let parts = argument.split(separator: ":")
        guard parts.count == 2, let code = HTTP2ErrorCode.parse(parts[0]), let rate = parseRate(parts[1]) else { return nil }
        self.init(errorCode: code, rate: rate)
    }

    public var description: String { "\(HTTP2ErrorCode.name(errorCode)):\(rate)" }
}

/// What an error answer's body is replaced with by the garbage-body fault.
public enum GarbageBodyKind: String, Sendable, CaseIterable {
    /// An HTML page: text, but not JSON.
    case text
    /// 256 bytes that are neither UTF-8 nor JSON.
    case binary
    /// A well-formed `{"reason":…}` padded to 1 MiB.
    case oversized
    /// `{"reason":"EmulatorUnknownReason"}`: JSON, but a reason APNs does not document.
    case unknownReason = "unknown-reason"
    /// `{"reason":"RRRR…"}` with a 10 KiB reason string.
    case longReason = "long-reason"
}

/// Replace the body of a share `rate` of error answers (any status but 200) with `kind`.
public struct InjectedGarbageBody: Sendable, Equatable, CustomStringConvertible {
    public var kind: GarbageBodyKind
    public var rate: Double

    public init(kind: GarbageBodyKind, rate: Double = 1) {
        self.kind = kind
        self.rate = rate
    }

    /// Parses `KIND` or `KIND:RATE`, e.g. `oversized` or `binary:0.5`.
    public init?(argument: some StringProtocol) {
        let parts = argument.split(separator: ":")
        guard (1...2).contains(parts.count), let kind = GarbageBodyKind(rawValue: String(parts[0])) else { return nil }
        var rate = 1.0
        if parts.count == 2 {
            guard let parsed = parseRate(parts[1]) else { return nil }
            rate = parsed
        }
        self.init(kind: kind, rate: rate)
    }

    public var description: String { "\(kind.rawValue):\(rate)" }

    /// Bytes of the `oversized` body.
    public static let oversizedBytes = 1 << 20
    /// Characters of the `long-reason` reason.
    public static let longReasonCharacters = 10 * 1024
    public static let unknownReason = "EmulatorUnknownReason"

    /// The body that replaces an error answer's `{"reason":"<reason>"}`.
    static func body(_ kind: GarbageBodyKind, reason: String) -> [UInt8] {
        switch kind {
        case .text:
            return Array("<html><head><title>Error</title></head><body><h1>\(reason)</h1></body></html>\n".utf8)
        case .binary:
            // Starts with bytes no UTF-8 text or JSON document can start with.
            return [0xFF, 0xFE, 0x00, 0xC0] + (0..<252).map { UInt8(truncatingIfNeeded: $0 &* 167 &+ 13) }
        case .oversized:
            let head = Array("{\"reason\":\"\(reason)\",\"padding\":\"".utf8)
            let tail = Array("\"}".utf8)
            return head + [UInt8](repeating: 0x78, count: max(0, oversizedBytes - head.count - tail.count)) + tail
        case .unknownReason:
            return Array("{\"reason\":\"\(unknownReason)\"}".utf8)
        case .longReason:
            return Array("{\"reason\":\"".utf8) + [UInt8](repeating: 0x52, count: longReasonCharacters) + Array("\"}".utf8)
        }
    }
}

/// The faults a running emulator injects besides `--error`: set at start through
/// `MockAPNsConfiguration.faults`, changed at run time through `/_herald/...` (see
/// `MockAPNsServer.control(path:)`). Owned by the server; read on every request only through
/// `streamFaultsOn`, so faults that are off cost one branch.
public struct MockAPNsFaults: Sendable, Equatable {
    /// Leave a share of requests (valid or not) unanswered: no HEADERS, no RST_STREAM, while the
    /// connection keeps answering PINGs and other streams.
    public var stallRate: Double = 0 { didSet { update() } }
    /// Leave the next this many requests unanswered (counted down before `stallRate` is drawn).
    public var stallNext: Int = 0 { didSet { update() } }
    /// Reset a share of streams instead of answering them.
    public var reset: InjectedReset? = nil { didSet { update() } }
    /// Replace the JSON body of a share of error answers.
    public var garbageBody: InjectedGarbageBody? = nil
    /// Stop acknowledging PING frames.
    public var ignorePing = false
    /// Answer every request that carries a provider token with 403 InvalidProviderToken.
    public var rejectTokens = false
    /// Never open the flow-control window again on connections accepted while this is on: each
    /// takes 65,535 bytes of DATA in all, then starves its client (PINGs are still answered).
    public var withholdWindow = false

    /// True when a stall or reset may apply to a request: the only fault check on the hot path.
    public private(set) var streamFaultsOn = false

    public init() {}

    private mutating func update() {
        streamFaultsOn = stallRate > 0 || stallNext > 0 || (reset.map { $0.rate > 0 } ?? false)
    }

    /// The faults as a JSON object (`GET /_herald/faults`).
    public func json(maxStreams: UInt32, latencyMilliseconds: Int64) -> String {
        "{\"max_streams\":\(maxStreams),\"latency_ms\":\(latencyMilliseconds),\"stall_rate\":\(stallRate),\"stall_next\":\(stallNext),"
            + "\"reset\":" + (reset.map { "{\"error_code\":\"\(HTTP2ErrorCode.name($0.errorCode))\",\"rate\":\($0.rate)}" } ?? "null")
            + ",\"garbage_body\":" + (garbageBody.map { "{\"kind\":\"\($0.kind.rawValue)\",\"rate\":\($0.rate)}" } ?? "null")
            + ",\"ignore_ping\":\(ignorePing),\"reject_tokens\":\(rejectTokens),\"withhold_window\":\(withholdWindow)}"
    }
}
