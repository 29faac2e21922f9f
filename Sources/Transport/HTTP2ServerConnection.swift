import CHeraldShims
import CNGHTTP2
import Glibc

/// One HTTP/2 request received by an `HTTP2ServerConnection`.
public struct HTTP2ServerRequest {
    public let streamID: Int32
    public var method = ""
    public var path = ""
    public var authority = ""
    /// Regular (non-pseudo) header fields in arrival order, names lowercase as HTTP/2 requires.
    public var headers: [(name: String, value: String)] = []
    public var body: [UInt8] = []
    /// True when the peer sent more body than the server keeps (`maxBodyBytes`).
    public var bodyTruncated = false

    init(streamID: Int32) { self.streamID = streamID }

    /// The first value of header `name`, and how many times it appeared.
    public func header(_ name: String) -> (value: String?, count: Int) {
        var first: String? = nil
        var count = 0
        for field in headers where field.name == name {
            if first == nil { first = field.value }
            count += 1
        }
        return (first, count)
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

    private var requests: [Int32: HTTP2ServerRequest] = [:]
    private var ready: [Int32] = []
    private var responses: [Int32: [UInt8]] = [:]
    private var responseOffsets: [Int32: Int] = [:]

    public init(loop: EventLoop, fd: Int32, tlsContext: TLSContext, identifier: Int, initialMaxConcurrentStreams: UInt32) throws(ConnectionError) {
        self.identifier = identifier
        self.initialMaxConcurrentStreams = initialMaxConcurrentStreams
        super.init(loop: loop, host: "client")
        try adopt(fd: fd, context: tlsContext)
    }

    override func tlsEstablished() throws(ConnectionError) {
        var callbacks: OpaquePointer? = nil
        nghttp2_session_callbacks_new(&callbacks)
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, serverOnBeginHeaders)
        nghttp2_session_callbacks_set_on_header_callback(callbacks, serverOnHeader)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, serverOnDataChunk)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, serverOnFrameRecv)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, serverOnStreamClose)
        var newSession: OpaquePointer? = nil
        let rc = nghttp2_session_server_new(&newSession, callbacks, Unmanaged.passUnretained(self).toOpaque())
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

    /// Answers stream `streamID` (ignored if the stream is gone, e.g. reset by the client).
    public func respond(streamID: Int32, status: Int, headers: [(String, String)], body: [UInt8]) {
        guard let session, isOpen else { return }
        var fields: [(String, String)] = [(":status", String(status))]
        fields.append(contentsOf: headers)
        if !body.isEmpty {
            fields.append(("content-type", "application/json"))
            fields.append(("content-length", String(body.count)))
        }
        let bytes = fields.map { (Array($0.0.utf8), Array($0.1.utf8)) }
        var provider = nghttp2_data_provider()
        provider.read_callback = serverReadBody
        if !body.isEmpty {
            responses[streamID] = body
            responseOffsets[streamID] = 0
        }
        withNameValues(bytes) { nva in
            if body.isEmpty {
                _ = nghttp2_submit_response(session, streamID, nva.baseAddress, nva.count, nil)
            } else {
                _ = nghttp2_submit_response(session, streamID, nva.baseAddress, nva.count, &provider)
            }
        }
        scheduleFlush()
    }

    /// Sends GOAWAY with `lastStreamID` (streams above it were not processed) and a JSON reason.
    public func sendGoAway(lastStreamID: Int32, errorCode: UInt32 = 0, reasonJSON: String?) {
        guard let session, isOpen else { return }
        var data = Array((reasonJSON ?? "").utf8)
        _ = nghttp2_submit_goaway(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), lastStreamID, errorCode, &data, data.count)
        scheduleFlush()
    }

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
            guard let request = requests[streamID] else { continue }
            delegate?.connection(self, received: request)
        }
    }

    override func didClose(_ error: ConnectionError?) {
        requests.removeAll()
        responses.removeAll()
        responseOffsets.removeAll()
        delegate?.connectionClosed(self, error: error)
    }

    // MARK: nghttp2 events

    fileprivate func beginHeaders(streamID: Int32) {
        requests[streamID] = HTTP2ServerRequest(streamID: streamID)
        streamsReceived += 1
    }

    fileprivate func header(streamID: Int32, name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) {
        guard requests[streamID] != nil else { return }
        let nameText = String(decoding: name, as: UTF8.self)
        let valueText = String(decoding: value, as: UTF8.self)
        switch nameText {
        case ":method": requests[streamID]!.method = valueText
        case ":path": requests[streamID]!.path = valueText
        case ":authority": requests[streamID]!.authority = valueText
        case ":scheme": break
        default: requests[streamID]!.headers.append((nameText, valueText))
        }
    }

    fileprivate func data(streamID: Int32, bytes: UnsafeBufferPointer<UInt8>) {
        guard requests[streamID] != nil else { return }
        let room = maxBodyBytes - requests[streamID]!.body.count
        if bytes.count > room { requests[streamID]!.bodyTruncated = true }
        if room > 0 { requests[streamID]!.body.append(contentsOf: bytes.prefix(room)) }
    }

    fileprivate func frameReceived(type: UInt8, flags: UInt8, streamID: Int32) {
        let endStream = flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0
        if endStream && (type == UInt8(NGHTTP2_HEADERS.rawValue) || type == UInt8(NGHTTP2_DATA.rawValue)) {
            ready.append(streamID)
        }
    }

    fileprivate func streamClosed(streamID: Int32) {
        requests[streamID] = nil
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

/// Builds an nghttp2 name/value array over byte arrays for the duration of `body`.
func withNameValues<R>(_ fields: [([UInt8], [UInt8])], _ body: (UnsafeBufferPointer<nghttp2_nv>) -> R) -> R {
    let storage = UnsafeMutablePointer<UInt8>.allocate(capacity: max(1, fields.reduce(0) { $0 + $1.0.count + $1.1.count }))
    defer { storage.deallocate() }
    let nva = UnsafeMutablePointer<nghttp2_nv>.allocate(capacity: max(1, fields.count))
    defer { nva.deallocate() }
    var offset = 0
    for (index, field) in fields.enumerated() {
        let name = storage + offset
        name.initialize(from: field.0, count: field.0.count)
        offset += field.0.count
        let value = storage + offset
        value.initialize(from: field.1, count: field.1.count)
        offset += field.1.count
        nva[index] = nghttp2_nv(name: name, value: value, namelen: field.0.count, valuelen: field.1.count, flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue))
    }
    return body(UnsafeBufferPointer(start: nva, count: fields.count))
}

private func server(_ userData: UnsafeMutableRawPointer?) -> HTTP2ServerConnection {
    Unmanaged<HTTP2ServerConnection>.fromOpaque(userData!).takeUnretainedValue()
}

private let serverOnBeginHeaders: nghttp2_on_begin_headers_callback = { _, frame, userData in
    guard let frame, frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue),
          frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST else { return 0 }
    server(userData).beginHeaders(streamID: frame.pointee.hd.stream_id)
    return 0
}

private let serverOnHeader: nghttp2_on_header_callback = { _, frame, name, nameLength, value, valueLength, _, userData in
    guard let frame, frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue) else { return 0 }
    server(userData).header(
        streamID: frame.pointee.hd.stream_id,
        name: UnsafeBufferPointer(start: name, count: nameLength),
        value: UnsafeBufferPointer(start: value, count: valueLength))
    return 0
}

private let serverOnDataChunk: nghttp2_on_data_chunk_recv_callback = { _, _, streamID, data, length, userData in
    server(userData).data(streamID: streamID, bytes: UnsafeBufferPointer(start: data, count: length))
    return 0
}

private let serverOnFrameRecv: nghttp2_on_frame_recv_callback = { _, frame, userData in
    if let frame {
        server(userData).frameReceived(type: frame.pointee.hd.type, flags: frame.pointee.hd.flags, streamID: frame.pointee.hd.stream_id)
    }
    return 0
}

private let serverOnStreamClose: nghttp2_on_stream_close_callback = { _, streamID, _, userData in
    server(userData).streamClosed(streamID: streamID)
    return 0
}

private let serverReadBody: nghttp2_data_source_read_callback = { _, streamID, buffer, length, flags, _, userData in
    server(userData).readBody(streamID: streamID, into: buffer!, length: length, flags: flags!)
}
