import CHeraldShims
import CNGHTTP2

/// The far end of an in-memory HTTP/2 pair for the micro-benchmarks (`Benchmarks/`): an nghttp2
/// server session that answers every request with one fixed status (and, for an error, a fixed
/// JSON body), allocating nothing of its own per stream.
///
/// Unlike `HTTP2ServerConnection` (the emulator's, which keeps every header as a `String`), it
/// reads no headers, so what a benchmark counts is the client's cost plus nghttp2's. Owned and
/// pumped by the benchmark; never used by the worker.
@_spi(Benchmarks)
public final class InMemoryAPNsResponder: HTTP2Endpoint {
    /// Requests answered so far.
    public private(set) var answered = 0
    private let maxConcurrentStreams: UInt32
    private var ready: [Int32] = []
    private let nameValues: UnsafeMutablePointer<nghttp2_nv>
    private let nameValueCount: Int
    private let fieldBytes: UnsafeMutableBufferPointer<UInt8>
    private let body: UnsafeMutableBufferPointer<UInt8>

    /// Answers with `status`; a non-empty `body` is sent as `application/json`.
    public init(loop: EventLoop, status: Int, body: String = "", maxConcurrentStreams: UInt32 = 1000) {
        self.maxConcurrentStreams = maxConcurrentStreams
        var fields: [([UInt8], [UInt8])] = [(Array(":status".utf8), Array(String(status).utf8))]
        if !body.isEmpty {
            fields.append((Array("content-type".utf8), Array("application/json".utf8)))
            fields.append((Array("content-length".utf8), Array(String(body.utf8.count).utf8)))
        }
        fieldBytes = .allocate(capacity: fields.reduce(0) { $0 + $1.0.count + $1.1.count })
        nameValues = .allocate(capacity: fields.count)
        nameValueCount = fields.count
        var offset = 0
        for (index, (name, value)) in fields.enumerated() {
            let namePointer = fieldBytes.baseAddress! + offset
            namePointer.initialize(from: name, count: name.count)
            offset += name.count
            let valuePointer = fieldBytes.baseAddress! + offset
            valuePointer.initialize(from: value, count: value.count)
            offset += value.count
            nameValues[index] = nghttp2_nv(
                name: namePointer, value: valuePointer, namelen: name.count, valuelen: value.count,
                flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue))
        }
        self.body = .allocate(capacity: body.utf8.count)
        _ = self.body.initialize(from: body.utf8)
        ready.reserveCapacity(Int(maxConcurrentStreams))
        super.init(loop: loop, host: "in-memory")
    }

    deinit {
        fieldBytes.deallocate()
        nameValues.deallocate()
        body.deallocate()
    }

    override func tlsEstablished() throws(ConnectionError) {
        var callbacks: OpaquePointer? = nil
        nghttp2_session_callbacks_new(&callbacks)
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, responderOnFrameRecv)
        var newSession: OpaquePointer? = nil
        // The same per-connection free-list pool as the client's session, so that a benchmark's
        // malloc count is Herald's client side, not this stand-in for APNs.
        var mem = pooledAllocator()
        let rc = nghttp2_session_server_new3(&newSession, callbacks, Unmanaged.passUnretained(self).toOpaque(), nil, &mem)
        guard rc == 0, let newSession else { throw .protocolError("nghttp2_session_server_new failed (\(rc))") }
        session = newSession
        var settings = [
            nghttp2_settings_entry(
                settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue), value: maxConcurrentStreams),
        ]
        _ = nghttp2_submit_settings(newSession, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, 1)
    }

    override func sessionProcessedInput() {
        guard let session, !ready.isEmpty else { return }
        var provider = nghttp2_data_provider()
        provider.read_callback = responderReadBody
        for streamID in ready {
            if body.isEmpty {
                _ = nghttp2_submit_response(session, streamID, nameValues, nameValueCount, nil)
            } else {
                _ = nghttp2_submit_response(session, streamID, nameValues, nameValueCount, &provider)
            }
            answered += 1
        }
        ready.removeAll(keepingCapacity: true)
    }

    fileprivate func requestEnded(streamID: Int32) { ready.append(streamID) }

    fileprivate func readBody(into buffer: UnsafeMutablePointer<UInt8>, length: Int, flags: UnsafeMutablePointer<UInt32>) -> Int {
        // Error bodies are far smaller than a DATA frame: one read sends the whole body.
        let count = min(length, body.count)
        buffer.update(from: body.baseAddress!, count: count)
        flags.pointee |= UInt32(NGHTTP2_DATA_FLAG_EOF.rawValue)
        return count
    }
}

@inline(__always)
private func withResponder<R>(_ userData: UnsafeMutableRawPointer?, _ body: (InMemoryAPNsResponder) -> R) -> R {
    withUnretained(userData, body)
}

private let responderOnFrameRecv: nghttp2_on_frame_recv_callback = { _, frame, userData in
    guard let frame else { return 0 }
    let type = frame.pointee.hd.type
    let endStream = frame.pointee.hd.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0
    if endStream && (type == UInt8(NGHTTP2_HEADERS.rawValue) || type == UInt8(NGHTTP2_DATA.rawValue)) {
        withResponder(userData) { $0.requestEnded(streamID: frame.pointee.hd.stream_id) }
    }
    return 0
}

private let responderReadBody: nghttp2_data_source_read_callback = { _, _, buffer, length, flags, _, userData in
    withResponder(userData) { $0.readBody(into: buffer!, length: length, flags: flags!) }
}
