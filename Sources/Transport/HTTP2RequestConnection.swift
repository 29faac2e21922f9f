import CNGHTTP2
import Glibc

/// One HTTP/2 answer: status, headers (lowercase names) and body (capped at
/// `HTTP2RequestConnection.maxBodyBytes`).
public struct HTTP2Response: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    /// The first value of header `name` (lowercase).
    public func header(_ name: String) -> String? {
        headers.first { $0.name == name }?.value
    }
}

/// A connection that sends one request of any method and reads back the whole answer, headers
/// included: for command-line tools (`herald channels` and the channel management API), where
/// `APNsConnection`'s notification pipeline does not fit. TLS verification is always on (the
/// `TLSContext` decides what is trusted). Loop-confined; not for the delivery path.
public final class HTTP2RequestConnection: HTTP2Endpoint {
    /// The most body kept from an answer; more is dropped (a peer cannot make a tool hold more).
    public static let maxBodyBytes = 1 << 20

    public let port: Int
    private let tlsContext: TLSContext
    private var method = ""
    private var path = ""
    private var requestHeaders: [(name: String, value: String)] = []
    private var requestBody: [UInt8] = []
    private var bodyOffset = 0
    private var response = HTTP2Response(status: 0, headers: [], body: [])
    private var completion: ((Result<HTTP2Response, ConnectionError>) -> Void)?
    private var tcpConnected = false

    public init(loop: EventLoop, host: String, port: Int, tlsContext: TLSContext) {
        self.port = port
        self.tlsContext = tlsContext
        super.init(loop: loop, host: host)
    }

    /// Connects, sends the request and calls `completion` once, on the loop, with the answer or
    /// why there is none; then the connection closes.
    public func send(method: String, path: String, headers: [(name: String, value: String)], body: [UInt8],
                     completion: @escaping (Result<HTTP2Response, ConnectionError>) -> Void) {
        self.method = method
        self.path = path
        requestHeaders = headers
        requestBody = body
        self.completion = completion
        let fd: Int32
        do {
            fd = try Socket.startConnect(host: host, port: port)
        } catch {
            _ = loop.schedule(afterMilliseconds: 0) { [self] in finish(.failure(.connectFailed(error))) }
            return
        }
        do {
            try adopt(fd: fd, context: tlsContext)
        } catch {
            Glibc.close(fd)
            self.fd = -1
            _ = loop.schedule(afterMilliseconds: 0) { [self] in finish(.failure(error)) }
        }
    }

    /// The same, blocking: runs its own event loop until the answer or `timeoutMilliseconds`.
    public static func perform(host: String, port: Int, tlsContext: TLSContext, method: String, path: String,
                               headers: [(name: String, value: String)], body: [UInt8] = [],
                               timeoutMilliseconds: Int64) throws -> Result<HTTP2Response, ConnectionError> {
        let loop = try EventLoop()
        let connection = HTTP2RequestConnection(loop: loop, host: host, port: port, tlsContext: tlsContext)
        var result: Result<HTTP2Response, ConnectionError> = .failure(.timedOut("waiting for \(host):\(port) to answer"))
        connection.send(method: method, path: path, headers: headers, body: body) { answer in
            result = answer
            loop.stop()
        }
        _ = loop.schedule(afterMilliseconds: timeoutMilliseconds) { loop.stop() }
        loop.run()
        connection.terminate(.closedLocally)
        return result
    }

    private func finish(_ result: Result<HTTP2Response, ConnectionError>) {
        guard let completion else { return }
        self.completion = nil
        completion(result)
        if isOpen { terminate(.closedLocally) }
    }

    // A refused connect must be reported as such, not as a failed TLS handshake.
    public override func writable() {
        if !tcpConnected && !checkConnected() { return }
        super.writable()
    }

    public override func readable() {
        if !tcpConnected && !checkConnected() { return }
        super.readable()
    }

    private func checkConnected() -> Bool {
        let error = Socket.pendingError(fd)
        if error != 0 {
            terminate(.connectFailed(SystemError(operation: "connecting to \(host):\(port)", errno: error)))
            return false
        }
        tcpConnected = true
        return true
    }

    override func tlsEstablished() throws(ConnectionError) {
        var callbacks: OpaquePointer? = nil
        nghttp2_session_callbacks_new(&callbacks)
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_on_header_callback(callbacks, requestOnHeader)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, requestOnDataChunk)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, requestOnStreamClose)
        var newSession: OpaquePointer? = nil
        let rc = nghttp2_session_client_new(&newSession, callbacks, Unmanaged.passUnretained(self).toOpaque())
        guard rc == 0, let newSession else { throw .protocolError("nghttp2_session_client_new failed (\(rc))") }
        session = newSession
        var settings = [nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_ENABLE_PUSH.rawValue), value: 0)]
        _ = nghttp2_submit_settings(newSession, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, settings.count)

        let authority = port == 443 ? host : "\(host):\(port)"
        var fields: [(name: String, value: String)] = [(":method", method), (":scheme", "https"), (":authority", authority), (":path", path)]
        fields.append(contentsOf: requestHeaders)
        if !requestBody.isEmpty { fields.append(("content-length", String(requestBody.count))) }
        var bytes: [UInt8] = []
        var spans: [(Int, Int, Int, Int)] = []
        for field in fields {
            let nameStart = bytes.count
            bytes.append(contentsOf: field.name.utf8)
            let valueStart = bytes.count
            bytes.append(contentsOf: field.value.utf8)
            spans.append((nameStart, valueStart - nameStart, valueStart, bytes.count - valueStart))
        }
        let streamID = bytes.withUnsafeMutableBufferPointer { buffer -> Int32 in
            let base = buffer.baseAddress!
            // nghttp2 copies names and values (NGHTTP2_NV_FLAG_NONE) before submit returns.
            var list = spans.map { span in
                nghttp2_nv(name: base + span.0, value: base + span.2, namelen: span.1, valuelen: span.3,
                           flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue))
            }
            if requestBody.isEmpty {
                return nghttp2_submit_request(newSession, nil, &list, list.count, nil, nil)
            }
            var provider = nghttp2_data_provider()
            provider.read_callback = requestReadBody
            return nghttp2_submit_request(newSession, nil, &list, list.count, &provider, nil)
        }
        guard streamID > 0 else { throw .protocolError("the request could not be submitted (\(streamID))") }
        scheduleFlush()
    }

    fileprivate func onHeader(name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) {
        let nameText = String(decoding: name, as: UTF8.self)
        let valueText = String(decoding: value, as: UTF8.self)
        if nameText == ":status" {
            response.status = Int(valueText) ?? 0
        } else if response.headers.count < 64 {
            response.headers.append((nameText, valueText))
        }
    }

    fileprivate func onData(_ bytes: UnsafeBufferPointer<UInt8>) {
        let room = HTTP2RequestConnection.maxBodyBytes - response.body.count
        if room > 0 { response.body.append(contentsOf: bytes.prefix(room)) }
    }

    fileprivate func onStreamClose(errorCode: UInt32) {
        // Answered after nghttp2 returns: finishing closes the session it is still inside.
        let result: Result<HTTP2Response, ConnectionError> = response.status > 0
            ? .success(response) : .failure(.protocolError("the stream was reset (error code \(errorCode)) before an answer"))
        _ = loop.schedule(afterMilliseconds: 0) { [weak self] in self?.finish(result) }
    }

    fileprivate func readBody(into buffer: UnsafeMutablePointer<UInt8>, length: Int, flags: UnsafeMutablePointer<UInt32>) -> Int {
        let count = min(length, requestBody.count - bodyOffset)
        if count > 0 {
            requestBody.withUnsafeBufferPointer { buffer.update(from: $0.baseAddress! + bodyOffset, count: count) }
        }
        bodyOffset += count
        if bodyOffset >= requestBody.count { flags.pointee |= UInt32(NGHTTP2_DATA_FLAG_EOF.rawValue) }
        return count
    }

    override func didClose(_ error: ConnectionError?) {
        let cause = error ?? .closedByPeer
        _ = loop.schedule(afterMilliseconds: 0) { [weak self] in self?.finish(.failure(cause)) }
    }
}

private let requestOnHeader: nghttp2_on_header_callback = { _, frame, name, nameLength, value, valueLength, _, userData in
    guard let frame, frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue) else { return 0 }
    withUnretained(userData) { (connection: HTTP2RequestConnection) in
        connection.onHeader(name: UnsafeBufferPointer(start: name, count: nameLength), value: UnsafeBufferPointer(start: value, count: valueLength))
    }
    return 0
}

private let requestOnDataChunk: nghttp2_on_data_chunk_recv_callback = { _, _, _, data, length, userData in
    withUnretained(userData) { (connection: HTTP2RequestConnection) in connection.onData(UnsafeBufferPointer(start: data, count: length)) }
    return 0
}

private let requestOnStreamClose: nghttp2_on_stream_close_callback = { _, _, errorCode, userData in
    withUnretained(userData) { (connection: HTTP2RequestConnection) in connection.onStreamClose(errorCode: errorCode) }
    return 0
}

private let requestReadBody: nghttp2_data_source_read_callback = { _, _, buffer, length, flags, _, userData in
    withUnretained(userData) { (connection: HTTP2RequestConnection) in connection.readBody(into: buffer!, length: length, flags: flags!) }
}
