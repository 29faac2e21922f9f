import APNs
import Queue


/// The inputs every benchmark shares: one APNs-shaped alert as a worker reads it from Redis.
/// Sizes follow issue 4's load: a 64-hex-digit token and a 256-byte payload.
public enum Fixtures {
    public static let token = "8f3c9e1a27b54d6f90ac13e7b2d48f65a1c09e3b7d24f6a85c1e90b3d7a26f4e"
    /// A distinct 64-hex-digit token for each `n` (the end-to-end piece's jobs).
    public static func token(_ n: Int) -> String {
        let hex = Array("0123456789abcdef".utf8)
        var bytes = Array(token.utf8)
        var value = UInt64(n)
        for position in 0..<16 {
            bytes[63 - position] = hex[Int(value & 0xF)]
            value >>= 4
        }
        return String(decoding: bytes, as: UTF8.self)
    }
    public static let bundleID = "com.example.herald"
    public static let origin = "1717171717171-0"

    /// A JSON object of exactly `size` bytes: an alert padded with a custom key.
    public static func payload(bytes size: Int) -> [UInt8] {
        let head = #"{"aps":{"alert":{"title":"Herald","body":"Your order has shipped"},"badge":1,"sound":"default"},"pad":""#
        let tail = #""}"#
        let padding = max(0, size - head.utf8.count - tail.utf8.count)
        return Array((head + String(repeating: "x", count: padding) + tail).utf8)
    }

    public static let payload256 = payload(bytes: 256)

    /// The fields of a stream entry as `XREADGROUP` hands them to the decoder.
    public static let jobFields: [(name: String, value: [UInt8])] = [
        (JobField.token, Array(token.utf8)),
        (JobField.payload, payload256),
        (JobField.pushType, Array("alert".utf8)),
        (JobField.priority, Array("10".utf8)),
        (JobField.collapseID, Array("order-4711".utf8)),
    ]

    public static let jobDefaults = JobDefaults(bundleID: bundleID)
    public static let entryID = StreamEntryID(milliseconds: 1_717_171_717_171, sequence: 0)

    /// The notification as the worker submits it: every header set, a stable apns-id.
    public static let notification = Notification(
        deviceToken: token, topic: bundleID, pushType: .alert, priority: .immediate,
        expiration: 1_717_200_000, collapseID: "order-4711",
        apnsID: StableID.apnsID(origin: origin, token: token), payload: payload256)

    public static let liveActivity = Notification(
        deviceToken: token, topic: bundleID + ".push-type.liveactivity", pushType: .liveactivity,
        payload: Array(#"{"aps":{"timestamp":1717171717,"event":"start","attributes-type":"Delivery","attributes":{"order":4711},"content-state":{"eta":12}}}"#.utf8))

    /// `bearer <JWT>`: the size of a real ES256 provider token.
    public static let authorization = Array(("bearer " + String(repeating: "a", count: 36) + "." + String(repeating: "b", count: 64) + "." + String(repeating: "c", count: 86)).utf8)

    public static let body410 = Array(#"{"reason":"Unregistered","timestamp":1717171717171}"#.utf8)
    public static let body400 = Array(#"{"reason":"BadDeviceToken"}"#.utf8)
    public static let bodyUnknown = Array(#"{"reason":"SomethingNew"}"#.utf8)
}
