import APNs

/// The input as a notification payload: scanned by `JSONScanner` (every value visited through
/// the accessors the worker and the emulator use) and validated for every push type, as the
/// job decoder and `herald enqueue` do.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    let json = JSONScanner(bytes)
    if let root = try? json.validate() {
        guard root.range.lowerBound >= 0, root.range.upperBound <= size else {
            fatalError("root value \(root.range) outside \(size) bytes")
        }
        visit(root, in: json, size: size, depth: 0)
        _ = json.rootMember("aps")
        _ = json.apsMember("alert")
        _ = json.apsMember("timestamp").flatMap { json.int64($0) }
        _ = json.apsMember("event").map { json.stringEquals($0, "start") }
    }
    let payload = Array(bytes)
    for pushType in PushType.allCases {
        let notification = Notification(
            deviceToken: String(repeating: "ab", count: 32), topic: pushType.topic(bundleID: "com.example.app"),
            pushType: pushType, payload: payload)
        _ = try? notification.validate()
    }
    return 0
}

/// Reads every value below `value` with the scanner's accessors; each member's range must lie
/// inside the input and inside its parent.
private func visit(_ value: JSONScanner.Value, in json: JSONScanner, size: Int, depth: Int) {
    switch value.kind {
    case .object:
        try? json.forEachMember(of: value) { name, member in
            guard name.lowerBound >= value.range.lowerBound, name.upperBound <= value.range.upperBound,
                member.range.lowerBound >= value.range.lowerBound, member.range.upperBound <= value.range.upperBound
            else { fatalError("member outside its object") }
            _ = json.textEquals(name, "aps")
            if depth < 64 { visit(member, in: json, size: size, depth: depth + 1) }
        }
    case .string:
        _ = json.string(value)
        _ = json.stringEquals(value, "update")
    case .number:
        _ = json.int64(value)
        _ = json.double(value)
    default:
        _ = json.bool(value)
    }
}
