/// The payload rules of a broadcast push (`POST /4/broadcasts/apps/<bundle id>`): a broadcast
/// always updates Live Activities, so its payload is held to the Live Activity rules, but APNs
/// allows it 5120 bytes instead of a device push's 4096.
extension Notification {
    /// The largest broadcast payload APNs accepts, in bytes.
    public static let maxBroadcastPayloadBytes = 5120

    /// The first rule a broadcast payload breaks, or nil: not empty, at most
    /// `maxBroadcastPayloadBytes`, one JSON object, and the Live Activity members (`aps.timestamp`,
    /// `aps.event`, and for `start` `attributes-type` and `attributes`) that `validate()` checks
    /// for `liveactivity` device pushes. Reads the bytes in place.
    public static func broadcastPayloadError(_ payload: ArraySlice<UInt8>) -> NotificationError? {
        payload.withUnsafeBufferPointer { bytes -> NotificationError? in
            guard bytes.count > 0 else { return .payloadEmpty }
            guard bytes.count <= maxBroadcastPayloadBytes else {
                return .payloadTooLarge(byteCount: bytes.count, limit: maxBroadcastPayloadBytes)
            }
            let json = JSONScanner(bytes)
            let root: JSONScanner.Value
            do throws(JSONScanner.SyntaxError) {
                root = try json.validate()
            } catch {
                return .payloadNotJSON(error)
            }
            guard root.kind == .object else { return .payloadNotObject(found: root.kind) }
            return liveActivityError(in: json)
        }
    }
}
