import APNs

/// One injected error: answer `status` with `reason` to a share `rate` (0…1) of valid requests.
public struct InjectedError: Sendable, Equatable, CustomStringConvertible {
    public var status: Int
    public var reason: String
    public var rate: Double

    public init(status: Int, reason: String, rate: Double) {
        self.status = status
        self.reason = reason
        self.rate = rate
    }

    /// Parses `STATUS:REASON:RATE`, e.g. `503:ServiceUnavailable:0.01`.
    public init?(argument: String) {
        let parts = argument.split(separator: ":")
        guard parts.count == 3, let status = Int(parts[0]), (100...599).contains(status),
              let rate = Double(parts[2]), (0...1).contains(rate), !parts[1].isEmpty else { return nil }
        self.init(status: status, reason: String(parts[1]), rate: rate)
    }

    public var description: String { "\(status):\(reason):\(rate)" }
}

/// How the APNs emulator listens, what it checks and which faults it injects.
public struct MockAPNsConfiguration: Sendable {
    public var host = "127.0.0.1"
    /// 0 picks a free port (read it back from the server).
    public var port = 0
    /// PEM certificate and key to present; when nil a self-signed pair is generated at start.
    public var certificateFile: String? = nil
    public var keyFile: String? = nil
    /// Where to write the generated certificate so clients can trust it (`--ca-file`).
    public var certificateOut: String? = nil

    /// The key that signs provider tokens (public key PEM or the `.p8`); nil accepts any
    /// well-formed token without checking its signature.
    public var jwtKeyPEM: String? = nil
    public var teamID: String? = nil
    public var keyID: String? = nil
    /// Clients presenting a certificate that verifies against this file (PEM) are authenticated
    /// without a provider token (APNs' certificate-based authentication).
    public var clientCAFile: String? = nil
    /// When set, `apns-topic` must be this bundle id plus the push type's suffix.
    public var bundleID: String? = nil

    /// SETTINGS_MAX_CONCURRENT_STREAMS after the first valid request (connections start at 1).
    public var maxStreams: UInt32 = 1000
    /// Delay before each answer.
    public var latencyMilliseconds: Int64 = 0
    public var injectedErrors: [InjectedError] = []
    /// Device tokens starting with this (lowercase hex) are always 410 Unregistered.
    public var unregisteredPrefix: String? = nil
    /// Device tokens starting with this get 429 TooManyRequests for their first `throttleCount` requests.
    public var throttlePrefix: String? = nil
    public var throttleCount = 1
    /// After a 429 to a `throttlePrefix` token, its requests within this many ms get 429 too (each
    /// one starting the window again), as APNs keeps throttling a token that is not left alone.
    /// 0: only the first `throttleCount` requests.
    public var throttleWindowMilliseconds: Int64 = 0
    /// Device tokens starting with any of these (lowercase hex) get 400 BadDeviceToken: tokens of
    /// the other APNs environment, when two emulators play production and sandbox.
    public var badTokenPrefixes: [String] = []
    /// Each connection sends GOAWAY (Shutdown) after this many streams.
    public var goAwayAfterStreams: Int? = nil
    /// Each connection is dropped without GOAWAY after this many streams.
    public var disconnectAfterStreams: Int? = nil
    /// Stalled and reset streams, garbage error bodies, ignored PINGs, rejected provider tokens:
    /// their values at start (the `/_herald/...` switches change them while running).
    public var faults = MockAPNsFaults()
    /// Record enqueue-to-answer latency of accepted requests from the payload's top-level `"t"`
    /// (ms or µs since the epoch; see `LatencyRecorder`). Off by default: it costs a payload scan.
    public var measureLatency = false
    /// With `measureLatency`: the width of the timeline's windows, and the latency above which an
    /// answer counts as over (`LatencyTimeline`).
    public var timelineWindowMilliseconds: Int64 = 10
    public var timelineOverMilliseconds: Int64 = 5
    /// How many distinct apns-ids to make room for up front (benchmarks: their notification count).
    public var expectedNotifications = 0
    /// Seed for the injected-error draws (reproducible runs).
    public var seed: UInt64 = 0x4845_5241_4c44
    /// Port of the channel management API (`/1/apps/<bundle>/channels`), served over TLS + HTTP/2
    /// with the same certificate and token checks as the push port; 0 picks a free one, nil
    /// serves none. APNs serves it on its own host (ports 2195 sandbox, 2196 production).
    public var channelsPort: Int? = 0
    /// Channels one bundle id may hold (APNs: 10,000 per app and environment); tests lower it.
    public var maxChannelsPerApp = ChannelStore.defaultMaxChannelsPerApp
    /// Answer every broadcast 400 FeatureNotEnabled, as APNs does for an app without broadcast
    /// push enabled (`--broadcast-disabled`).
    public var broadcastDisabled = false
    /// Send `apns-unique-id` on device-push answers too, as APNs' sandbox does (`--unique-ids`).
    /// Broadcast answers always carry it. Off by default: it costs an allocation per answer.
    public var uniqueIDs = false
    /// Clock for token ages and the 20-minute rule (tests inject a manual one).
    public var time: TimeSource = .system

    public init() {}
}
