import APNs
import CNGHTTP2

/// Lays out the HTTP/2 request headers of one APNs notification in a reusable scratch area.
///
/// Owned by one connection. nghttp2 copies names and values during `nghttp2_submit_request`,
/// so the same memory serves every request: building headers allocates nothing. Values that
/// outlast the call where they already lie (`:method`, `:scheme`, `:authority`, the push type,
/// the provider token) are handed over from there; only those built per request (`:path`,
/// numbers, `apns-id`) or held in a string (topic, collapse id, channel id) are written to the
/// scratch area first. `:path` and `apns-id` are sent without HPACK indexing (they change with
/// every notification); the rest may be indexed.
///
/// SPI `Benchmarks` makes it reachable from the micro-benchmark package; it is not public API.
@_spi(Benchmarks)
public final class RequestHeaderBuilder {
    private let scratch: UnsafeMutablePointer<UInt8>
    private let scratchCapacity = RequestHeaderBuilder.capacity
    private let nva: UnsafeMutablePointer<nghttp2_nv>
    private let nvaCapacity = 12
    private let names: UnsafeMutablePointer<UInt8>
    /// Where each name lies in `names`, in `Name.allCases` order. A `let`: a lazy array was
    /// checked, retained and released on every request.
    private let nameRangesInOrder: [(Int, Int)]
    /// `:authority`'s bytes, allocated once: handed to nghttp2 from here.
    private let authority: UnsafeMutableBufferPointer<UInt8>
    /// Requests until `apns-id` is indexed again (0: this one). Its name is then in the
    /// connection's HPACK table (requests are serialised in the order built: stream ids rise),
    /// and the unindexed values in between name it by its index. Once every 1,024 requests, so
    /// that other indexed values (expirations, collapse ids) cannot push it out for good.
    private var requestsUntilAPNsIDIndexed = 0
    private var apnsIDNameIndexed: Bool { requestsUntilAPNsIDIndexed > 0 }

    /// A request's headers were built (and go to nghttp2): one less until the next indexed apns-id.
    private func countAPNsIDSent() {
        requestsUntilAPNsIDIndexed = requestsUntilAPNsIDIndexed == 0 ? 1_023 : requestsUntilAPNsIDIndexed - 1
    }

    enum Name: CaseIterable {
        case method, scheme, path, authority, pushType, topic, priority, expiration, collapseID, apnsID, authorization, channelID
        var text: String {
            switch self {
            case .method: ":method"
            case .scheme: ":scheme"
            case .path: ":path"
            case .authority: ":authority"
            case .pushType: "apns-push-type"
            case .topic: "apns-topic"
            case .priority: "apns-priority"
            case .expiration: "apns-expiration"
            case .collapseID: "apns-collapse-id"
            case .apnsID: "apns-id"
            case .authorization: "authorization"
            case .channelID: "apns-channel-id"
            }
        }
    }

    public init(authority: String) {
        scratch = .allocate(capacity: scratchCapacity)
        nva = .allocate(capacity: nvaCapacity)
        let all = Name.allCases.map { Array($0.text.utf8) }
        names = .allocate(capacity: all.reduce(0) { $0 + $1.count })
        var offset = 0
        var ranges: [(Int, Int)] = []
        for bytes in all {
            (names + offset).initialize(from: bytes, count: bytes.count)
            ranges.append((offset, bytes.count))
            offset += bytes.count
        }
        nameRangesInOrder = ranges
        self.authority = .allocate(capacity: authority.utf8.count)
        _ = self.authority.initialize(from: authority.utf8)
    }

    deinit {
        scratch.deallocate()
        nva.deallocate()
        names.deallocate()
        authority.deallocate()
    }

    /// nghttp2's flags for one header. Names are not copied (`NO_COPY_NAME`): they are lowercase
    /// already and live in `names` as long as this builder, which outlives every request its
    /// connection's session queues (the session is deleted first); nghttp2 would otherwise copy
    /// and lowercase each name of each request. Values change with each request in `scratch`, so
    /// nghttp2 copies those.
    static func flags(noIndex: Bool) -> UInt8 {
        UInt8(NGHTTP2_NV_FLAG_NO_COPY_NAME.rawValue | (noIndex ? NGHTTP2_NV_FLAG_NO_INDEX.rawValue : NGHTTP2_NV_FLAG_NONE.rawValue))
    }

    /// The most bytes of the values written to the scratch area for one request (path, topic,
    /// collapse id, numbers, apns-id); a request needing more is never sent.
    public static let capacity = 16 * 1024

    /// Calls `body` with the header list for `notification`; the pointers are valid only inside it.
    /// Returns nil, without calling `body`, when the values written do not fit in `capacity`
    /// bytes: a request is never sent with a header cut short or left out.
    /// Inlined into the connection's `submit`: as a call, the builder was retained and released
    /// around it for every request.
    @inline(__always)
    public func withHeaders<R>(
        for notification: Notification, authorization: [UInt8]?,
        _ body: (UnsafePointer<nghttp2_nv>, Int) -> R
    ) -> R? {
        guard let authorization else { return withHeaders(for: notification, authorizationBytes: nil, body) }
        return authorization.withUnsafeBufferPointer { withHeaders(for: notification, authorizationBytes: $0, body) }
    }

    /// The same, with the `authorization` value's bytes (valid during the call).
    @inline(__always)
    public func withHeaders<R>(
        for notification: Notification, authorizationBytes authorization: UnsafeBufferPointer<UInt8>?,
        _ body: (UnsafePointer<nghttp2_nv>, Int) -> R
    ) -> R? {
        withHeaders(template: notification, token: notification.token, apnsIDBits: notification.apnsIDBits,
                    apnsIDText: notification.apnsIDBits == nil ? notification.apnsID : nil, authorization: authorization, body)
    }

    /// The same for a request: its template's fields, its own token and apns-id.
    @inline(__always)
    public func withHeaders<R>(
        for request: borrowing PendingRequest, authorizationBytes authorization: UnsafeBufferPointer<UInt8>?,
        _ body: (UnsafePointer<nghttp2_nv>, Int) -> R
    ) -> R? {
        withHeaders(template: request.source.template, token: request.token, apnsIDBits: request.apnsIDBits,
                    apnsIDText: request.apnsIDText, authorization: authorization, body)
    }

    /// The headers of `template` sent to `token` with the apns-id given as bits or text (the
    /// template's own token and apns-id are not read).
    @inline(__always)
    func withHeaders<R>(
        template notification: borrowing Notification, token: DeviceToken, apnsIDBits: UUIDBits?, apnsIDText: String?,
        authorization: UnsafeBufferPointer<UInt8>?, _ body: (UnsafePointer<nghttp2_nv>, Int) -> R
    ) -> R? {
        if notification.isBroadcast {
            return withBroadcastHeaders(template: notification, channelID: token, apnsIDBits: apnsIDBits, apnsIDText: apnsIDText,
                                        authorization: authorization, body)
        }
        var writer = Writer(base: scratch, capacity: scratchCapacity)
        var count = 0
        let nameOffsets = nameRangesInOrder
        func add(_ name: Int, _ value: Range<Int>, noIndex: Bool = false) {
            add(name, UnsafeBufferPointer(start: scratch + value.lowerBound, count: value.count), noIndex: noIndex)
        }
        // A value where it lies, valid until `body` returns (nghttp2 copies it there).
        func add(_ name: Int, _ value: UnsafeBufferPointer<UInt8>, noIndex: Bool = false) {
            let (offset, length) = nameOffsets[name]
            nva[count] = nghttp2_nv(
                name: names + offset, value: UnsafeMutablePointer(mutating: value.baseAddress),
                namelen: length, valuelen: value.count,
                flags: RequestHeaderBuilder.flags(noIndex: noIndex))
            count += 1
        }
        add(0, RequestHeaderBuilder.bytes(of: "POST"))
        add(1, RequestHeaderBuilder.bytes(of: "https"))
        let pathStart = writer.position
        _ = writer.append(staticString: "/3/device/")
        _ = writer.append(token)
        add(2, pathStart..<writer.position, noIndex: true)
        add(3, UnsafeBufferPointer(authority))
        add(4, RequestHeaderBuilder.bytes(of: notification.pushType.headerValue))
        add(5, writer.append(notification.topic))
        // APNs assumes 10 when the header is absent, which a background push may not use: send the
        // push type's own default whenever it is not 10.
        let defaultPriority = notification.pushType.defaultPriority
        if let priority = notification.priority ?? (defaultPriority == .immediate ? nil : defaultPriority) {
            add(6, writer.append(integer: Int64(priority.rawValue)))
        }
        if let expiration = notification.expiration { add(7, writer.append(integer: expiration)) }
        if let collapseID = notification.collapseID { add(8, writer.append(collapseID)) }
        // Unique per notification: indexing it would only push the topic, push type and authority
        // out of HPACK's 4 KB table (on both sides), so they would travel in full again.
        //
        // One in 1,024 (the connection's first among them) is indexed all the same, so that the
        // header's name is in the table: the others then name it by its index instead of spelling
        // it out, Huffman-coded, for both sides to code and decode (`requestsUntilAPNsIDIndexed`).
        if let bits = apnsIDBits {
            add(9, writer.append(uuid: bits), noIndex: apnsIDNameIndexed)
        } else if let apnsIDText {
            add(9, writer.append(apnsIDText), noIndex: apnsIDNameIndexed)
        }
        if let authorization { add(10, authorization) }
        if writer.overflowed { return nil }
        countAPNsIDSent()
        return body(nva, count)
    }

    /// A broadcast's headers: `POST /4/broadcasts/apps/<bundle id>` (the bare bundle id, no
    /// push-type suffix, no `apns-topic`), `apns-channel-id`, `apns-push-type: liveactivity`,
    /// `apns-priority` (always written: 10 draws on the hourly budget and should be a choice
    /// APNs sees), `apns-expiration` when given, `apns-id` and the provider token. No collapse id:
    /// broadcasts have none (the decoder refuses one).
    private func withBroadcastHeaders<R>(
        template notification: borrowing Notification, channelID: DeviceToken, apnsIDBits: UUIDBits?, apnsIDText: String?,
        authorization: UnsafeBufferPointer<UInt8>?, _ body: (UnsafePointer<nghttp2_nv>, Int) -> R
    ) -> R? {
        var writer = Writer(base: scratch, capacity: scratchCapacity)
        var count = 0
        let nameOffsets = nameRangesInOrder
        func add(_ name: Name, _ value: Range<Int>, noIndex: Bool = false) {
            add(name, UnsafeBufferPointer(start: scratch + value.lowerBound, count: value.count), noIndex: noIndex)
        }
        func add(_ name: Name, _ value: UnsafeBufferPointer<UInt8>, noIndex: Bool = false) {
            let (offset, length) = nameOffsets[Name.allCases.firstIndex(of: name)!]
            nva[count] = nghttp2_nv(
                name: names + offset, value: UnsafeMutablePointer(mutating: value.baseAddress),
                namelen: length, valuelen: value.count,
                flags: RequestHeaderBuilder.flags(noIndex: noIndex))
            count += 1
        }
        add(.method, RequestHeaderBuilder.bytes(of: "POST"))
        add(.scheme, RequestHeaderBuilder.bytes(of: "https"))
        let pathStart = writer.position
        _ = writer.append(staticString: "/4/broadcasts/apps/")
        _ = writer.append(notification.topic)
        // One path per app: indexing it is what HPACK is for.
        add(.path, pathStart..<writer.position)
        add(.authority, UnsafeBufferPointer(authority))
        add(.pushType, RequestHeaderBuilder.bytes(of: PushType.liveactivity.headerValue))
        add(.channelID, writer.append(channelID))
        add(.priority, writer.append(integer: Int64(notification.effectivePriority.rawValue)))
        if let expiration = notification.expiration { add(.expiration, writer.append(integer: expiration)) }
        if let bits = apnsIDBits {
            add(.apnsID, writer.append(uuid: bits), noIndex: apnsIDNameIndexed)
        } else if let apnsIDText {
            add(.apnsID, writer.append(apnsIDText), noIndex: apnsIDNameIndexed)
        }
        if let authorization { add(.authorization, authorization) }
        if writer.overflowed { return nil }
        countAPNsIDSent()
        return body(nva, count)
    }

    /// A static string's bytes (they live as long as the program).
    @inline(__always)
    static func bytes(of string: StaticString) -> UnsafeBufferPointer<UInt8> {
        UnsafeBufferPointer(start: string.utf8Start, count: string.utf8CodeUnitCount)
    }

    /// Appends bytes to the scratch area and returns where they landed. A value that does not fit
    /// is not written at all and sets `overflowed`.
    struct Writer {
        let base: UnsafeMutablePointer<UInt8>
        let capacity: Int
        var position = 0
        var overflowed = false

        mutating func append(bytes: UnsafeBufferPointer<UInt8>) -> Range<Int> {
            let start = position
            guard bytes.count <= capacity - position else {
                overflowed = true
                return start..<start
            }
            if bytes.count > 0 { (base + position).update(from: bytes.baseAddress!, count: bytes.count) }
            position += bytes.count
            return start..<position
        }

        @inline(__always)
        mutating func append(staticString: StaticString) -> Range<Int> {
            append(bytes: RequestHeaderBuilder.bytes(of: staticString))
        }

        mutating func append(_ string: String) -> Range<Int> {
            // Borrowed through `utf8Span`: a `var` copy for `withUTF8` retained and released the
            // string's storage (the device token's, per request).
            string.utf8Span.span.withUnsafeBufferPointer { append(bytes: $0) }
        }

        /// A device token's text: a packed token's digits are written from its bytes.
        mutating func append(_ token: DeviceToken) -> Range<Int> {
            if let text = token.text { return append(text) }
            let start = position
            guard capacity - position >= DeviceToken.packedDigits else { overflowed = true; return start..<start }
            token.writeHex(into: base + position)
            position += DeviceToken.packedDigits
            return start..<position
        }

        mutating func append(uuid bits: UUIDBits) -> Range<Int> {
            let start = position
            guard capacity - position >= 36 else { overflowed = true; return start..<start }
            UUIDString.write(bits, into: base + position)
            position += 36
            return start..<position
        }

        mutating func append(integer: Int64) -> Range<Int> {
            let start = position
            guard capacity - position >= 20 else { overflowed = true; return start..<start }
            var value = integer.magnitude
            var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                         UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
                (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            var count = 0
            withUnsafeMutableBytes(of: &digits) { buffer in
                repeat {
                    buffer[count] = UInt8(value % 10) + 0x30
                    value /= 10
                    count += 1
                } while value > 0
                if integer < 0 && position < capacity { base[position] = 0x2D; position += 1 }
                while count > 0 && position < capacity {
                    count -= 1
                    base[position] = buffer[count]
                    position += 1
                }
            }
            return start..<position
        }
    }
}
