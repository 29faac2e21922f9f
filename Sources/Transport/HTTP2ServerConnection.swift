import APNs
import CHeraldShims
import CNGHTTP2
import Glibc

/// One HTTP/2 request received by an `HTTP2ServerConnection`.
public struct HTTP2ServerRequest {
    public internal(set) var streamID: Int32
    public internal(set) var method = ""
    /// `:path` as received. Kept as bytes in the slot's reused buffer: the emulator matches its
    /// routes and reads a device token from them without a String per request.
    public internal(set) var pathBytes: [UInt8] = []
    /// `:path` as text (invalid UTF-8 repaired); made on each call.
    public var path: String { String(decoding: pathBytes, as: UTF8.self) }
    public internal(set) var authority = ""
    /// Regular (non-pseudo) header fields in arrival order, names lowercase as HTTP/2 requires.
    /// Made on demand: a request keeps its fields as bytes (`fieldBytes`, `fields`), so receiving
    /// one costs no String per field and no String is freed when its slot is reused.
    public var headers: [(name: String, value: String)] {
        fields.map { (text($0.name), text($0.value)) }
    }
    public internal(set) var body: [UInt8] = []
    /// True when the peer sent more body than the server keeps (`maxBodyBytes`).
    public internal(set) var bodyTruncated = false

    /// The regular fields' names and values, back to back, and where each lies in them, with
    /// each name's `nameKey`.
    var fieldBytes: [UInt8] = []
    var fields: [(name: Range<Int>, value: Range<Int>, key: UInt64)] = []

    init(streamID: Int32) { self.streamID = streamID }

    /// Field bytes and fields a reused slot keeps room for; a larger header block's buffers are
    /// let go, so one huge request does not hold its memory in a slot for the connection's life.
    static let keptFieldBytes = 8 << 10
    static let keptFields = 64

    /// Empties the request for the next stream, keeping its buffers' capacity (the fields' up to
    /// `keptFieldBytes` and `keptFields`).
    mutating func reset(streamID: Int32) {
        self.streamID = streamID
        method = ""
        if pathBytes.capacity > Self.keptFieldBytes { pathBytes = [] }
        pathBytes.removeAll(keepingCapacity: true)
        authority = ""
        if fieldBytes.capacity > Self.keptFieldBytes { fieldBytes = [] }
        if fields.capacity > Self.keptFields { fields = [] }
        fieldBytes.removeAll(keepingCapacity: true)
        fields.removeAll(keepingCapacity: true)
        body.removeAll(keepingCapacity: true)
        bodyTruncated = false
    }

    mutating func appendField(name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) {
        let nameStart = fieldBytes.count
        fieldBytes.append(contentsOf: name)
        let valueStart = fieldBytes.count
        fieldBytes.append(contentsOf: value)
        fields.append((nameStart..<valueStart, valueStart..<fieldBytes.count, Self.nameKey(name)))
    }

    /// Whether `:path` starts with `prefix`.
    public func pathHasPrefix(_ prefix: String) -> Bool {
        pathBytes.starts(with: prefix.utf8)
    }

    /// A name's length (capped at 255) in the top byte over its first 7 bytes: two names with
    /// different keys differ, so a lookup compares one integer per field and the bytes past the
    /// seventh only when the keys match. The APNs header names all differ within their key.
    static func nameKey(_ name: UnsafeBufferPointer<UInt8>) -> UInt64 {
        var key = UInt64(min(name.count, 255)) << 56
        for i in 0..<min(name.count, 7) { key |= UInt64(name[i]) << (8 * UInt64(i)) }
        return key
    }

    static func nameKey(_ name: String) -> UInt64 {
        var name = name
        return name.withUTF8 { nameKey($0) }
    }

    /// Field text as the emulator reads it: invalid UTF-8 repaired, as when it was a String.
    private func text(_ range: Range<Int>) -> String {
        fieldBytes.withUnsafeBufferPointer { String(decoding: UnsafeBufferPointer(rebasing: $0[range]), as: UTF8.self) }
    }

    /// Whether the field name in `range`, whose key is `name`'s key already, is `name` (the
    /// lengths are compared again: the key caps them at 255).
    private func restEquals(_ range: Range<Int>, _ name: String) -> Bool {
        guard range.count > 7 else { return true }
        var name = name
        return name.withUTF8 { expected in
            expected.count == range.count && fieldBytes.withUnsafeBufferPointer {
                memcmp($0.baseAddress! + range.lowerBound + 7, expected.baseAddress! + 7, range.count - 7) == 0
            }
        }
    }

    /// The bytes of the first value of header `name` (nil when absent), without making a String.
    public func headerBytes(_ name: String) -> ArraySlice<UInt8>? {
        let key = Self.nameKey(name)
        for field in fields where field.key == key && restEquals(field.name, name) { return fieldBytes[field.value] }
        return nil
    }

    /// The first value of header `name`, and how many times it appeared.
    public func header(_ name: String) -> (value: String?, count: Int) {
        let key = Self.nameKey(name)
        var first: String? = nil
        var count = 0
        for field in fields where field.key == key && restEquals(field.name, name) {
            if first == nil { first = text(field.value) }
            count += 1
        }
        return (first, count)
    }

    /// True when a header whose name starts with `prefix`, or is `name`, appears more than once.
    public func hasDuplicateHeader(prefix: String, orName name: String) -> Bool {
        let nameKey = Self.nameKey(name)
        let prefixCount = prefix.utf8.count
        // Within the key's 7 bytes the prefix is a masked compare; a longer one compares bytes.
        let prefixMask: UInt64 = prefixCount >= 7 ? (1 << 56) - 1 : (1 << (8 * UInt64(prefixCount))) - 1
        let prefixKey = Self.nameKey(prefix) & prefixMask
        func isChecked(_ field: (name: Range<Int>, value: Range<Int>, key: UInt64)) -> Bool {
            if field.key == nameKey && restEquals(field.name, name) { return true }
            guard field.name.count >= prefixCount, field.key & prefixMask == prefixKey else { return false }
            return prefixCount <= 7 || fieldBytes[field.name.prefix(prefixCount)].elementsEqual(prefix.utf8)
        }
        // A handful of fields: comparing pairs beats building a set.
        for i in fields.indices where isChecked(fields[i]) {
            let nameI = fields[i].name
            for j in fields.indices where j > i && fields[j].key == fields[i].key {
                if fieldBytes[fields[j].name].elementsEqual(fieldBytes[nameI]) { return true }
            }
        }
        return false
    }
}

/// Hears requests arriving on a server connection; called on the loop, outside nghttp2 callbacks.
public protocol HTTP2ServerConnectionDelegate: AnyObject {
    /// A request with its whole body arrived. Answer it now or later with `respond`.
    func connection(_ connection: HTTP2ServerConnection, received request: HTTP2ServerRequest)
    /// The connection is gone.
    func connectionClosed(_ connection: HTTP2ServerConnection, error: ConnectionError?)
}

/// The server side of an HTTP/2-over-TLS connection on nghttp2: Herald's APNs emulator serves
/// each accepted socket with one. Confined to its event loop.
public final class HTTP2ServerConnection: HTTP2Endpoint {
    public weak var delegate: (any HTTP2ServerConnectionDelegate)?
    public let identifier: Int
    public var maxBodyBytes = 64 * 1024
    public var initialMaxConcurrentStreams: UInt32
    /// Streams seen on this connection.
    public private(set) var streamsReceived = 0
    /// Opaque per-connection state for the delegate (the emulator keeps its token bookkeeping here).
    public var userState: AnyObject?
    /// The `last_stream_id` of the GOAWAY this server sent, if any. Streams above it are refused,
    /// never handed to the delegate: the client was told they were not processed and sends them
    /// again elsewhere, so answering them would deliver them twice.
    public private(set) var goAwayLastStreamID: Int32 = .max
    /// Streams refused because they arrived after this server's GOAWAY.
    public private(set) var streamsRefusedAfterGoAway = 0
    /// Whether PING frames are acknowledged. nghttp2's automatic acknowledgement is off on this
    /// session so that a test server can stop answering (a peer that looks dead to liveness checks).
    public var answersPings = true
    /// PING frames acknowledged, and received while `answersPings` was off.
    public private(set) var pingsAnswered = 0
    public private(set) var pingsIgnored = 0
    /// Whether the flow-control windows open again as DATA is read (nghttp2's automatic
    /// WINDOW_UPDATE). Off, the client can send 65,535 bytes of DATA on the connection in all: a
    /// test server that starves clients. Read when the session is created (after the handshake).
    public var grantsWindow = true

    /// Requests being received, in slots reused from stream to stream (the stream's nghttp2 user
    /// data is its slot index + 1), so a request costs no dictionary and keeps its buffers.
    private var slots: [HTTP2ServerRequest] = []
    private var freeSlots: [Int] = []
    /// The stream last begun or looked up (0: none) and its slot (see `cachedSlot`).
    private var cachedStream: Int32 = 0
    private var cachedStreamSlot = 0
    private var ready: [Int32] = []
    private var responses: [Int32: [UInt8]] = [:]
    private var responseOffsets: [Int32: Int] = [:]
    /// What `respond` writes a usual answer's header values into (see there).
    private static let responseScratchBytes = 256
    private let responseScratch = UnsafeMutablePointer<UInt8>.allocate(capacity: HTTP2ServerConnection.responseScratchBytes)
    private let responseNames: UnsafeMutablePointer<UInt8>

    private static let nameBytes = Array(":statusapns-idcontent-typecontent-lengthapns-unique-id".utf8)

    public convenience init(loop: EventLoop, fd: Int32, tlsContext: TLSContext, identifier: Int, initialMaxConcurrentStreams: UInt32) throws(ConnectionError) {
        self.init(inMemoryOn: loop, identifier: identifier, initialMaxConcurrentStreams: initialMaxConcurrentStreams)
        try adopt(fd: fd, context: tlsContext)
    }

    /// A connection with no socket yet: the socket initializer adopts one; tests and
    /// micro-benchmarks wire it to a peer in memory with `startInMemory`, `receiveInMemory` and
    /// `sendInMemory`.
    @_spi(Benchmarks)
    public init(inMemoryOn loop: EventLoop, identifier: Int = 0, initialMaxConcurrentStreams: UInt32) {
        self.identifier = identifier
        self.initialMaxConcurrentStreams = initialMaxConcurrentStreams
        responseNames = .allocate(capacity: HTTP2ServerConnection.nameBytes.count)
        responseNames.initialize(from: HTTP2ServerConnection.nameBytes, count: HTTP2ServerConnection.nameBytes.count)
        super.init(loop: loop, host: "client")
    }

    override var lingersOnClose: Bool { true }

    override func tlsEstablished() throws(ConnectionError) {
        var callbacks: OpaquePointer? = nil
        nghttp2_session_callbacks_new(&callbacks)
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, serverOnBeginHeaders)
        nghttp2_session_callbacks_set_on_header_callback(callbacks, serverOnHeader)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, serverOnDataChunk)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, serverOnFrameRecv)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, serverOnStreamClose)
        var option: OpaquePointer? = nil
        nghttp2_option_new(&option)
        defer { nghttp2_option_del(option) }
        // PINGs are acknowledged in `pingReceived`, which can also leave them unanswered.
        nghttp2_option_set_no_auto_ping_ack(option, 1)
        // With automatic updates off and nothing consumed by hand, no WINDOW_UPDATE is ever sent.
        if !grantsWindow { nghttp2_option_set_no_auto_window_update(option, 1) }
        var newSession: OpaquePointer? = nil
        // Blocks recycled on this loop, as the client's: nghttp2 allocates per stream and per
        // header it keeps, and malloc and free were 4 % of the emulator's CPU.
        var mem = pooledAllocator()
        let rc = nghttp2_session_server_new3(&newSession, callbacks, Unmanaged.passUnretained(self).toOpaque(), option, &mem)
        guard rc == 0, let newSession else { throw .protocolError("nghttp2_session_server_new failed (\(rc))") }
        session = newSession
        setMaxConcurrentStreams(initialMaxConcurrentStreams)
    }

    /// Announces a new SETTINGS_MAX_CONCURRENT_STREAMS to the client.
    public func setMaxConcurrentStreams(_ value: UInt32) {
        guard let session else { return }
        var settings = [nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue), value: value)]
        _ = nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, 1)
        scheduleFlush()
    }

    deinit {
        responseScratch.deallocate()
        responseNames.deallocate()
    }

    /// Answers stream `streamID` with `status`, an `apns-id` and an optional JSON body (ignored if
    /// the stream is gone, e.g. reset by the client). Builds its header list without allocating.
    /// `uniqueID`, when given, is sent as `apns-unique-id` (as APNs' sandbox does), written
    /// straight into the header scratch: no String per response.
    /// `apnsIDWords`, when `apnsID` is nil, is written the same way as the `apns-id`: the two words
    /// spelled as they are (`UUIDString.writeVerbatim`).
    public func respond(streamID: Int32, status: Int, apnsID: String?, apnsIDWords: (high: UInt64, low: UInt64)? = nil,
                        uniqueID: UUIDBits? = nil, body: [UInt8]) {
        guard let session, isOpen else { return }
        var nva = (nghttp2_nv(), nghttp2_nv(), nghttp2_nv(), nghttp2_nv(), nghttp2_nv())
        var count = 0
        var used = 0
        // Every value whole: the status and a content-length (at most 20 digits each), the
        // apns-id as the client sent it (any length a header block can carry) or 36 bytes,
        // the unique id, the content type. The usual answer fits the connection's scratch; a
        // longer one (a client's oversized apns-id echoed back) gets a buffer of its own.
        let needed = 20 + (apnsID?.utf8.count ?? 36) + 36 + 16 + 20
        let scratch = needed <= HTTP2ServerConnection.responseScratchBytes ? responseScratch : .allocate(capacity: needed)
        defer { if scratch != responseScratch { scratch.deallocate() } }
        func value(_ text: String) -> (UnsafeMutablePointer<UInt8>, Int) {
            var text = text
            let start = scratch + used
            let length = text.withUTF8 { bytes -> Int in
                if let base = bytes.baseAddress { start.update(from: base, count: bytes.count) }
                return bytes.count
            }
            used += length
            return (start, length)
        }
        // An id differs in every response: indexed, each one would push an entry out of both
        // sides' HPACK tables (an allocation and a copy on each), and nghttp2's encoder, whose
        // table keeps every entry of one name in one chain, compared each new id with all those
        // still held (5 % of the emulator's CPU). Sent without indexing, it is coded once.
        let unindexed = UInt8(NGHTTP2_NV_FLAG_NO_INDEX.rawValue)
        withUnsafeMutableBytes(of: &nva) { raw in
            let list = raw.baseAddress!.assumingMemoryBound(to: nghttp2_nv.self)
            func add(_ nameOffset: Int, _ nameLength: Int, _ text: String, flags: UInt8 = UInt8(NGHTTP2_NV_FLAG_NONE.rawValue)) {
                let (pointer, length) = value(text)
                list[count] = nghttp2_nv(name: responseNames + nameOffset, value: pointer, namelen: nameLength, valuelen: length, flags: flags)
                count += 1
            }
            func add(_ nameOffset: Int, _ nameLength: Int, uuid: (high: UInt64, low: UInt64)) {
                let start = scratch + used
                UUIDString.writeVerbatim(high: uuid.high, low: uuid.low, into: start)
                used += 36
                list[count] = nghttp2_nv(name: responseNames + nameOffset, value: start, namelen: nameLength, valuelen: 36, flags: unindexed)
                count += 1
            }
            add(0, 7, String(status))
            if let apnsID { add(7, 7, apnsID, flags: unindexed) } else if let apnsIDWords { add(7, 7, uuid: apnsIDWords) }
            if let uniqueID { add(40, 14, uuid: UUIDString.stamped(uniqueID)) }
            if !body.isEmpty {
                add(14, 12, "application/json")
                add(26, 14, String(body.count))
            }
            if body.isEmpty {
                _ = nghttp2_submit_response(session, streamID, list, count, nil)
            } else {
                responses[streamID] = body
                responseOffsets[streamID] = 0
                var provider = nghttp2_data_provider()
                provider.read_callback = serverReadBody
                _ = nghttp2_submit_response(session, streamID, list, count, &provider)
            }
        }
        scheduleFlush()
    }

    /// Answers stream `streamID` with `status`, the given extra headers (lowercase names) and an
    /// optional JSON body. Unlike `respond(streamID:status:apnsID:body:)` it allocates: it serves
    /// the emulator's cold paths (the channel management API, broadcasts, `apns-unique-id`),
    /// never the device-push answers a benchmark measures.
    public func respond(streamID: Int32, status: Int, headers extra: [(name: String, value: String)], body: [UInt8]) {
        guard let session, isOpen else { return }
        var fields: [(name: String, value: String)] = [(":status", String(status))]
        fields.append(contentsOf: extra)
        if !body.isEmpty {
            fields.append(("content-type", "application/json"))
            fields.append(("content-length", String(body.count)))
        }
        var bytes: [UInt8] = []
        var spans: [(Int, Int, Int, Int)] = []
        for field in fields {
            let nameStart = bytes.count
            bytes.append(contentsOf: field.name.utf8)
            let valueStart = bytes.count
            bytes.append(contentsOf: field.value.utf8)
            spans.append((nameStart, valueStart - nameStart, valueStart, bytes.count - valueStart))
        }
        bytes.withUnsafeMutableBufferPointer { buffer in
            let base = buffer.baseAddress!
            // nghttp2 copies names and values (NGHTTP2_NV_FLAG_NONE) before submit returns.
            var list = spans.map { span in
                nghttp2_nv(name: base + span.0, value: base + span.2, namelen: span.1, valuelen: span.3,
                           flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue))
            }
            if body.isEmpty {
                _ = nghttp2_submit_response(session, streamID, &list, list.count, nil)
            } else {
                responses[streamID] = body
                responseOffsets[streamID] = 0
                var provider = nghttp2_data_provider()
                provider.read_callback = serverReadBody
                _ = nghttp2_submit_response(session, streamID, &list, list.count, &provider)
            }
        }
        scheduleFlush()
    }

    /// Sends GOAWAY with `lastStreamID` (streams above it were not processed) and a JSON reason.
    ///
    /// From here on, streams above `lastStreamID` are refused (RST_STREAM REFUSED_STREAM) instead of
    /// reaching the delegate. nghttp2 itself only starts ignoring them once the GOAWAY frame is
    /// serialized, and when the socket is backed up (a busy client) more requests can arrive before
    /// that: the client, told they were not processed, would send them again.
    public func sendGoAway(lastStreamID: Int32, errorCode: UInt32 = 0, reasonJSON: String?) {
        guard let session, isOpen else { return }
        goAwayLastStreamID = min(goAwayLastStreamID, lastStreamID)
        var data = Array((reasonJSON ?? "").utf8)
        _ = nghttp2_submit_goaway(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), lastStreamID, errorCode, &data, data.count)
        scheduleFlush()
    }

    /// Ends stream `streamID` with RST_STREAM `errorCode` instead of answering it (ignored if the
    /// stream is gone).
    public func resetStream(streamID: Int32, errorCode: UInt32) {
        guard let session, isOpen else { return }
        _ = nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), streamID, errorCode)
        scheduleFlush()
    }

    /// Streams received and not yet closed: being received, waiting for an answer, or having one
    /// sent. A stream the delegate never answers stays counted until the client resets it or the
    /// connection ends, when its slot goes with the connection.
    public var streamsOpen: Int { slots.count - freeSlots.count }

    /// The highest stream the client opened so far.
    public var lastStreamID: Int32 {
        guard let session else { return 0 }
        return nghttp2_session_get_last_proc_stream_id(session)
    }

    /// Drops the connection without a GOAWAY (an abrupt disconnect).
    public func abort() {
        terminate(.closedLocally)
    }

    override func sessionProcessedInput() {
        guard !ready.isEmpty else { return }
        let batch = ready
        ready.removeAll(keepingCapacity: true)
        for streamID in batch {
            guard let index = slotIndex(streamID) else { continue }
            if streamID > goAwayLastStreamID {
                streamsRefusedAfterGoAway += 1
                if let session {
                    _ = nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), streamID, UInt32(NGHTTP2_REFUSED_STREAM.rawValue))
                }
                scheduleFlush()
                continue
            }
            delegate?.connection(self, received: slots[index])
        }
    }

    override func didClose(_ error: ConnectionError?) {
        cachedStream = 0
        slots.removeAll()
        freeSlots.removeAll()
        responses.removeAll()
        responseOffsets.removeAll()
        delegate?.connectionClosed(self, error: error)
    }

    // MARK: nghttp2 events

    private func slotIndex(_ streamID: Int32) -> Int? {
        guard let session, let pointer = nghttp2_session_get_stream_user_data(session, streamID) else { return nil }
        return Int(bitPattern: pointer) - 1
    }

    fileprivate func beginHeaders(streamID: Int32) {
        guard let session else { return }
        let index: Int
        if let free = freeSlots.popLast() {
            index = free
            slots[index].reset(streamID: streamID)
        } else {
            index = slots.count
            slots.append(HTTP2ServerRequest(streamID: streamID))
        }
        nghttp2_session_set_stream_user_data(session, streamID, UnsafeMutableRawPointer(bitPattern: index + 1))
        cachedStream = streamID
        cachedStreamSlot = index
        streamsReceived += 1
    }

    fileprivate func header(streamID: Int32, name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) {
        guard let index = cachedSlot(streamID) else { return }
        if name.first == 0x3A {  // ":" pseudo-header
            switch name.count {
            case 7 where name[1] == 0x6D: slots[index].method = String(decoding: value, as: UTF8.self)      // :method
            case 5 where name[1] == 0x70:                                                                   // :path
                slots[index].pathBytes.removeAll(keepingCapacity: true)
                slots[index].pathBytes.append(contentsOf: value)
            case 10 where name[1] == 0x61: slots[index].authority = String(decoding: value, as: UTF8.self)  // :authority
            default: break                                                                                  // :scheme
            }
            return
        }
        slots[index].appendField(name: name, value: value)
    }

    /// `slotIndex`, remembered for the stream last begun or looked up: a header block's fields,
    /// and the DATA that most often follows on the same stream, skip nghttp2's stream lookup.
    /// Sound because a stream's slot is forgotten here when the stream closes (stream ids are
    /// never reused on a connection); any other stream is looked up.
    private func cachedSlot(_ streamID: Int32) -> Int? {
        if streamID == cachedStream { return cachedStreamSlot }
        let index = slotIndex(streamID)
        if let index {
            cachedStream = streamID
            cachedStreamSlot = index
        }
        return index
    }

    fileprivate func data(streamID: Int32, bytes: UnsafeBufferPointer<UInt8>) {
        guard let index = cachedSlot(streamID) else { return }
        let room = maxBodyBytes - slots[index].body.count
        if bytes.count > room { slots[index].bodyTruncated = true }
        if room > 0 { slots[index].body.append(contentsOf: bytes.prefix(room)) }
    }

    fileprivate func frameReceived(type: UInt8, flags: UInt8, streamID: Int32) {
        let endStream = flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0
        if endStream && (type == UInt8(NGHTTP2_HEADERS.rawValue) || type == UInt8(NGHTTP2_DATA.rawValue)) {
            ready.append(streamID)
        }
    }

    fileprivate func pingReceived(opaqueData: UnsafePointer<UInt8>) {
        guard answersPings, let session else {
            pingsIgnored += 1
            return
        }
        pingsAnswered += 1
        // Called inside nghttp2_session_mem_recv; the ACK goes out with the flush after it.
        _ = nghttp2_submit_ping(session, UInt8(NGHTTP2_FLAG_ACK.rawValue), opaqueData)
        scheduleFlush()
    }

    fileprivate func streamClosed(streamID: Int32) {
        if streamID == cachedStream { cachedStream = 0 }
        if let index = slotIndex(streamID), index < slots.count {
            freeSlots.append(index)
        }
        responses[streamID] = nil
        responseOffsets[streamID] = nil
    }

    fileprivate func readBody(streamID: Int32, into buffer: UnsafeMutablePointer<UInt8>, length: Int, flags: UnsafeMutablePointer<UInt32>) -> Int {
        guard let body = responses[streamID], let offset = responseOffsets[streamID] else {
            flags.pointee |= UInt32(NGHTTP2_DATA_FLAG_EOF.rawValue)
            return 0
        }
        let count = min(length, body.count - offset)
        body.withUnsafeBufferPointer { buffer.update(from: $0.baseAddress! + offset, count: count) }
        responseOffsets[streamID] = offset + count
        if offset + count >= body.count {
            flags.pointee |= UInt32(NGHTTP2_DATA_FLAG_EOF.rawValue)
            responses[streamID] = nil
            responseOffsets[streamID] = nil
        }
        return count
    }
}

@inline(__always)
private func withServer<R>(_ userData: UnsafeMutableRawPointer?, _ body: (HTTP2ServerConnection) -> R) -> R {
    withUnretained(userData, body)
}

private let serverOnBeginHeaders: nghttp2_on_begin_headers_callback = { _, frame, userData in
    guard let frame, frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue),
          frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST else { return 0 }
    withServer(userData) { $0.beginHeaders(streamID: frame.pointee.hd.stream_id) }
    return 0
}

private let serverOnHeader: nghttp2_on_header_callback = { _, frame, name, nameLength, value, valueLength, _, userData in
    guard let frame, frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue) else { return 0 }
    withServer(userData) { $0.header(
        streamID: frame.pointee.hd.stream_id,
        name: UnsafeBufferPointer(start: name, count: nameLength),
        value: UnsafeBufferPointer(start: value, count: valueLength)) }
    return 0
}

private let serverOnDataChunk: nghttp2_on_data_chunk_recv_callback = { _, _, streamID, data, length, userData in
    withServer(userData) { $0.data(streamID: streamID, bytes: UnsafeBufferPointer(start: data, count: length)) }
    return 0
}

private let serverOnFrameRecv: nghttp2_on_frame_recv_callback = { _, frame, userData in
    if let frame, frame.pointee.hd.type == UInt8(NGHTTP2_PING.rawValue) {
        if frame.pointee.hd.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) == 0 {
            withUnsafeBytes(of: frame.pointee.ping.opaque_data) { opaque in
                withServer(userData) { $0.pingReceived(opaqueData: opaque.baseAddress!.assumingMemoryBound(to: UInt8.self)) }
            }
        }
    } else if let frame {
        withServer(userData) { $0.frameReceived(type: frame.pointee.hd.type, flags: frame.pointee.hd.flags, streamID: frame.pointee.hd.stream_id) }
    }
    return 0
}

private let serverOnStreamClose: nghttp2_on_stream_close_callback = { _, streamID, _, userData in
    withServer(userData) { $0.streamClosed(streamID: streamID) }
    return 0
}

private let serverReadBody: nghttp2_data_source_read_callback = { _, streamID, buffer, length, flags, _, userData in
    withServer(userData) { $0.readBody(streamID: streamID, into: buffer!, length: length, flags: flags!) }
}
