import APNs
import CHeraldShims
import CNGHTTP2
import Glibc

/// A notification on its way through one connection, with the caller's handle for it.
///
/// It names the notification's template (everything but the token and the apns-id) instead of
/// carrying a copy: the worker's requests name their job, so a send retains one object and
/// moves about 100 bytes into its stream slot, where a copied notification retained each of its
/// references (topic, payload, collapse id) and moved twice as many bytes each way.
public struct PendingRequest: Sendable {
    /// Everything but the device token and the apns-id (whatever `source.template` holds in
    /// their place is never read for this request).
    public var source: NotificationTemplate
    /// The device token (a broadcast's channel id).
    public var token: DeviceToken
    /// The apns-id as the 128 bits `UUIDString.make` spells (derived by Herald); nil when the
    /// request has `apnsIDText` or no apns-id at all.
    public var apnsIDBits: UUIDBits?
    /// The apns-id as given (a job's own `id`), when it is not `apnsIDBits`.
    public var apnsIDText: String?
    /// The caller's own reference (a job index, a slot): handed back with the outcome.
    public var context: UInt64
    /// Sends that counted as attempts so far (GOAWAY-refused streams do not count).
    public var attempts: Int
    /// Monotonic ms when the stream was submitted (set by the connection; request duration).
    public var submittedAt: Int64 = 0
    /// The answer's `apns-unique-id` (APNs' sandbox sends one), set by the connection when the
    /// response carried a well-formed one.
    public var uniqueID: UUIDBits? = nil

    /// The notification this request sends, whole (a copy: for tools and tests).
    public var notification: Notification {
        var notification = source.template
        notification.token = token
        if let apnsIDBits { notification.apnsIDBits = apnsIDBits } else { notification.apnsID = apnsIDText }
        return notification
    }

    /// The apns-id as text (built from `apnsIDBits` when Herald derived it): for logs and tools.
    public var apnsID: String? {
        apnsIDBits.map { UUIDString.make($0) } ?? apnsIDText
    }

    /// Where the headers of the objects releasing this request writes lie: its template's (the
    /// job's) and its device token's string (none for a packed token). For prefetch hints only.
    @inline(__always)
    var objectHeaders: (source: UnsafeRawPointer, token: UnsafeRawPointer?) {
        (UnsafeRawPointer(Unmanaged.passUnretained(source).toOpaque()), token.text.flatMap { storageHeader(of: $0) })
    }
}

extension PendingRequest {
    /// A request for `token` from `source`'s template, with the apns-id given as bits or text
    /// (or neither: APNs then makes one up).
    ///
    /// Declared in an extension and handed to the memberwise initializer: written as
    /// assignments to `self`, the optimizer built the value in a temporary and copied it whole
    /// into place (a retain and release of each of its references, for every send).
    public init(source: NotificationTemplate, token: DeviceToken, apnsIDBits: UUIDBits?, apnsIDText: String? = nil,
                context: UInt64, attempts: Int = 0) {
        self.init(source: source, token: token, apnsIDBits: apnsIDBits, apnsIDText: apnsIDBits == nil ? apnsIDText : nil,
                  context: context, attempts: attempts, submittedAt: 0, uniqueID: nil)
    }

    /// A request for one notification sent on its own: wrapped in a template of its own (one
    /// allocation). Requests sharing a notification should share a template instead.
    public init(notification: Notification, context: UInt64, attempts: Int = 0) {
        self.init(source: NotificationTemplate(template: notification), token: notification.token,
                  apnsIDBits: notification.apnsIDBits, apnsIDText: notification.apnsIDBits == nil ? notification.apnsID : nil,
                  context: context, attempts: attempts)
    }
}

/// Hears what happens on an `APNsConnection`. Every call comes on the connection's loop, never
/// from inside an nghttp2 callback, so the delegate may submit new requests from any of them.
public protocol APNsConnectionDelegate: AnyObject {
    /// TLS and HTTP/2 are up; streams can be submitted up to `streamSlots`.
    func connectionIsReady(_ connection: APNsConnection)
    /// One request reached a final state on this connection.
    /// The request is handed over (`consuming`): the delegate owns it and may change it without a copy.
    func connection(_ connection: APNsConnection, completed request: consuming PendingRequest, outcome: DeliveryOutcome)
    /// Requests reached their final states together (a read's answers, or a closed connection's
    /// streams): take each with `connection.nextCompletion(into:)` until it returns nil. The default
    /// hands each to `connection(_:completed:outcome:)`; one taken here whole lets the delegate
    /// load its own state once per batch instead of once per request. Any the delegate leaves
    /// are handed to `connection(_:completed:outcome:)` afterwards: none is dropped.
    func connectionHasCompletions(_ connection: APNsConnection)
    /// The number of free stream slots may have grown (SETTINGS raised the limit, or streams ended).
    func connectionSlotsChanged(_ connection: APNsConnection)
    /// The connection is gone. Every request it held was completed (as retryable) before this call.
    func connectionClosed(_ connection: APNsConnection, error: ConnectionError?)
    /// The server sent GOAWAY: the connection takes no new streams and closes when its streams end.
    func connectionIsGoingAway(_ connection: APNsConnection)
}

extension APNsConnectionDelegate {
    public func connectionIsGoingAway(_ connection: APNsConnection) {}

    public func connectionHasCompletions(_ connection: APNsConnection) {
        var request: PendingRequest?
        while let outcome = connection.nextCompletion(into: &request) {
            self.connection(connection, completed: request.take()!, outcome: outcome)
        }
    }
}

/// Holds the state behind each request's `context` and is told which contexts are about to
/// complete, before their completions are handed out one by one: it can start loading that state
/// for all of them at once instead of waiting on each in turn (with thousands of requests in
/// flight, it has left the CPU's caches by the time the answer comes). A hint: it must not change
/// anything.
public protocol CompletionPrefetching: AnyObject {
    func prefetch(contexts: UnsafeBufferPointer<UInt64>)
}

/// Starts loading the cache line at `address` for writing, without waiting for it. A hint: what
/// the program computes does not change, whatever the address.
@inlinable @inline(__always)
public func prefetchForWrite(_ address: UnsafeRawPointer) {
    herald_prefetch_for_write(address)
}

/// Starts loading the cache line at `address` for reading, without waiting for it. A hint.
@inlinable @inline(__always)
public func prefetchForRead(_ address: UnsafeRawPointer) {
    herald_prefetch_for_read(address)
}

// Where the header of a string's or an array's heap storage lies, the line a release writes (its
// reference count), for prefetch hints: the bytes of a native string and the elements of an array
// follow a 32-byte header (object header, then count and capacity or flags). Read without
// retaining anything; for a small or empty value the address is meaningless but harmless, as a
// prefetch never faults.

@inlinable
public func storageHeader(of string: String) -> UnsafeRawPointer? {
    string.utf8Span.span.withUnsafeBufferPointer { $0.baseAddress.map { UnsafeRawPointer($0) - 32 } }
}

@inlinable
public func storageHeader<Element>(of array: [Element]) -> UnsafeRawPointer? {
    array.withUnsafeBytes { $0.baseAddress.map { $0 - 32 } }
}


/// One HTTP/2 connection to APNs (or the emulator): TLS, nghttp2 client session, and a fixed
/// table of stream slots that holds each in-flight notification until its response.
///
/// Confined to its event loop. It builds request headers in a reusable scratch area (nghttp2
/// copies them), streams the payload straight from the notification's bytes into DATA frames,
/// and honours the peer's `SETTINGS_MAX_CONCURRENT_STREAMS` as it changes: `streamSlots` is
/// what the caller may still submit. It allocates nothing per notification in steady state.
public final class APNsConnection: HTTP2Endpoint {
    public enum State: Equatable, Sendable {
        case idle, connecting, ready, goingAway, closed
    }

    public weak var delegate: (any APNsConnectionDelegate)?
    public let port: Int
    public let identifier: Int
    public private(set) var state: State = .idle
    private let tlsContext: TLSContext

    /// Herald's own cap on concurrent streams (`--max-streams`).
    public let maxStreams: Int
    /// The peer's current limit; 1 until its SETTINGS say otherwise (APNs starts at 1).
    public private(set) var peerMaxConcurrentStreams: Int = 1
    public private(set) var inFlight = 0
    /// Streams submitted over the life of this connection.
    public private(set) var streamsOpened = 0

    /// `bearer <JWT>` bytes for token auth; nil for certificate auth. Set by the pool.
    public private(set) var authorization: [UInt8]? = nil {
        // The array's storage neither moves nor changes while the property holds it.
        didSet { authorizationBytes = authorization?.withUnsafeBufferPointer { $0 } }
    }
    /// `authorization`'s bytes, for `submit`: reading the array there retained and released it
    /// around every request (nghttp2 copies the value, so the bytes need to live only that long).
    private var authorizationBytes: UnsafeBufferPointer<UInt8>? = nil
    /// What the pool bound to this connection: token generation and when a request first carried
    /// it (wall ms; APNs' 20-minute rule counts from the first use, not from the binding).
    public private(set) var tokenGeneration: UInt64 = 0
    public private(set) var tokenFirstUsedAt: Int64 = 0
    /// False until a request carried the bound token: until then it may be replaced freely.
    public private(set) var tokenUsed = false
    /// The wall clock that stamps the token's first use (tests inject a manual one).
    public var clock: TimeSource = .system

    /// The stream slots, `maxStreams` of them, allocated once and reached through a pointer: each
    /// write through an array's subscript checked that its storage was not shared.
    private let slots: UnsafeMutablePointer<Slot>
    /// Each slot's request, beside its slot: initialized memory while the slot is `occupied`,
    /// moved in at submit and out at completion. As an optional inside the slot, a request was
    /// copied whole (225 bytes) through temporaries on its way in and out: six copies per submit
    /// and three per completion, against three and two now (callgrind, `herald-profile
    /// endtoend-reply`).
    private let requests: UnsafeMutablePointer<PendingRequest>
    private var freeSlotIndices: [Int32]
    private var completed: [Int32] = []
    /// The next of `completed` for `nextCompletion(into:)` to hand out.
    private var completedNext = 0
    /// The contexts of `completed`, handed to `prefetcher` before the completions (reused).
    private var completedContexts: [UInt64] = []
    /// Told which contexts are about to complete (see `CompletionPrefetching`).
    public var prefetcher: (any CompletionPrefetching)?
    private var goAwayLastStreamID: Int32 = Int32.max
    private var goAwayInfo: (code: UInt32, reason: String?)? = nil
    private var connectTimer: EventLoop.TimerID?
    private var pingTimer: EventLoop.TimerID?
    private var pingSentAt: Int64? = nil
    /// How long the connection may sit without input before a PING checks it.
    public var pingIntervalMilliseconds: Int64 = 60_000
    public var pingTimeoutMilliseconds: Int64 = 10_000
    public var connectTimeoutMilliseconds: Int64 = 10_000
    /// How long a stream may wait for its answer (`--response-timeout`). Past it the stream is
    /// reset and its request completes as `.responseTimeout`: retried as an attempt whose outcome
    /// is unknown, so a server that never answers one stream cannot hold its slot forever.
    public var responseTimeoutMilliseconds: Int64 = 30_000
    private var deadlineTimer: EventLoop.TimerID?
    private var localCompletionsScheduled = false
    /// A GOAWAY arrived during input processing; the delegate hears it after nghttp2 returns.
    private var goingAwayToReport = false

    private let headers: RequestHeaderBuilder

    struct Slot {
        /// Whether `requests` holds this slot's request (initialized memory).
        var occupied = false
        var status: Int32 = 0
        var body: [UInt8] = []
        var payloadOffset = 0
        var headersSent = false
        var failure: RetryCause? = nil
        var streamID: Int32 = 0
        /// Set when the request was completed here without being sent (its headers do not fit).
        var notSent = false
        /// The response's `apns-unique-id`, when it had one.
        var uniqueID: UUIDBits? = nil
        /// `request`'s context, read without touching the request (`CompletionPrefetching`).
        var context: UInt64 = 0
        /// Where the headers of the request's template and token string lie (noted at submit,
        /// while they are in cache): the completion releases both, and prefetches them first.
        var objectHeaders: (source: UnsafeRawPointer?, token: UnsafeRawPointer?) = (nil, nil)
        /// The request's payload bytes, noted at submit: its DATA frames are copied from here
        /// without touching the request. The request holds their storage, unchanged, until it
        /// leaves the slot, and this is emptied then.
        var payload = UnsafeRawBufferPointer(start: nil, count: 0)
    }

    /// False until the non-blocking TCP connect is known to have succeeded.
    private var tcpConnected = false

    public init(loop: EventLoop, host: String, port: Int, tlsContext: TLSContext, maxStreams: Int, identifier: Int = 0) {
        self.port = port
        self.tlsContext = tlsContext
        self.maxStreams = max(1, maxStreams)
        self.identifier = identifier
        slots = .allocate(capacity: self.maxStreams)
        slots.initialize(repeating: Slot(), count: self.maxStreams)
        requests = .allocate(capacity: self.maxStreams)
        freeSlotIndices = (0..<Int32(self.maxStreams)).reversed()
        completed.reserveCapacity(self.maxStreams)
        completedContexts.reserveCapacity(self.maxStreams)
        headers = RequestHeaderBuilder(authority: port == 443 ? host : "\(host):\(port)")
        super.init(loop: loop, host: host)
    }

    // The session the endpoint deletes afterwards calls nothing back while it is deleted: no
    // callback reads a slot once they are gone.
    deinit {
        for index in 0..<maxStreams where slots[index].occupied { (requests + index).deinitialize(count: 1) }
        requests.deallocate()
        slots.deinitialize(count: maxStreams)
        slots.deallocate()
    }

    /// How many more streams the caller may submit now: none while the payloads already submitted
    /// fill the peer's connection flow-control window.
    ///
    /// A stream whose DATA the window cannot take waits inside nghttp2 with its HEADERS sent: in
    /// a binary heap of every such stream, which each DATA frame sent walks down, while the peer
    /// holds it half open and its payload leaves the caches. With a peer that keeps the HTTP/2
    /// default window (65,535 bytes, as the emulator does) most of a tick's streams waited so,
    /// and the worker spent about 14 % more per notification than with a 16 MB window. Such a
    /// request waits in the caller's queue instead, and goes out, HEADERS and DATA together, when
    /// the peer's WINDOW_UPDATE arrives (input, after which `connectionSlotsChanged` is called).
    ///
    /// Read from stored counts only: the pool reads it through a reference it holds, and a call
    /// into nghttp2 here made the compiler retain and release the connection around each read
    /// (a side-table count, so the runtime's slow path).
    public var streamSlots: Int {
        guard state == .ready, isOpen, windowRoom > 0 else { return 0 }
        return max(0, min(maxStreams, peerMaxConcurrentStreams) - inFlight)
    }

    /// Payload bytes of the streams in flight not yet handed to nghttp2 as DATA.
    private(set) var unsentPayloadBytes = 0
    /// The peer's connection window less `unsentPayloadBytes`: what further payloads may take.
    /// Sending DATA lowers both sides alike; it is read from nghttp2 again after each input (a
    /// WINDOW_UPDATE raises it) and follows submits and abandoned payloads in between. None until
    /// the session exists.
    private(set) var windowRoom = 0

    /// Binds the provider token this connection sends from now on (token auth).
    public func setAuthorization(jwt: String, generation: UInt64) {
        authorization = Array("bearer \(jwt)".utf8)
        tokenGeneration = generation
        tokenFirstUsedAt = 0
        tokenUsed = false
    }

    // MARK: lifecycle

    /// Opens the TCP connection and starts TLS; the delegate hears `connectionIsReady` or `connectionClosed`.
    public func connect() {
        precondition(state == .idle, "an APNsConnection connects once; make a new one to reconnect")
        state = .connecting
        let fd: Int32
        do {
            fd = try Socket.startConnect(host: host, port: port)
        } catch {
            state = .closed
            let delegate = self.delegate
            loop.schedule(afterMilliseconds: 0) { [self] in delegate?.connectionClosed(self, error: .connectFailed(error)) }
            return
        }
        do {
            try adopt(fd: fd, context: tlsContext)
        } catch {
            Glibc.close(fd)
            self.fd = -1
            state = .closed
            let delegate = self.delegate
            loop.schedule(afterMilliseconds: 0) { [self] in delegate?.connectionClosed(self, error: error) }
            return
        }
        connectTimer = loop.schedule(afterMilliseconds: connectTimeoutMilliseconds) { [weak self] in
            guard let self, self.state == .connecting else { return }
            self.terminate(.timedOut("connecting to \(self.host):\(self.port)"))
        }
    }

    // A refused or unreachable connect must be reported as such, not as a failed TLS handshake.
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

    /// Stops taking streams and lets those in flight finish, then closes (graceful shutdown).
    public func shutdownGracefully() {
        guard state == .ready, let session else { return }
        state = .goingAway
        _ = nghttp2_submit_goaway(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), nghttp2_session_get_last_proc_stream_id(session), UInt32(NGHTTP2_NO_ERROR.rawValue), nil, 0)
        scheduleFlush()
        // The last answer closes a connection going away (sessionProcessedInput); with none in
        // flight, a timer does, after the GOAWAY is flushed and never from inside the caller.
        if inFlight == 0 {
            _ = loop.schedule(afterMilliseconds: 0) { [weak self] in
                guard let self, self.state == .goingAway, self.inFlight == 0 else { return }
                self.terminate(.closedLocally)
            }
        }
    }

    /// Bytes held in the HPACK table of the headers this connection receives (0 before the session).
    @_spi(Testing)
    public var receivedHeaderTableSize: Int {
        guard let session else { return 0 }
        return nghttp2_session_get_hd_inflate_dynamic_table_size(session)
    }

    /// Moves nghttp2's next client stream id (odd), so a test can reach the end of the id space.
    @_spi(Testing)
    public func setNextStreamID(_ id: Int32) -> Bool {
        guard let session else { return false }
        return nghttp2_session_set_next_stream_id(session, id) == 0
    }

    /// Closes now; in-flight requests complete as retryable on another connection.
    public func close() {
        terminate(.closedLocally)
    }

    override func tlsEstablished() throws(ConnectionError) {
        var callbacks: OpaquePointer? = nil
        nghttp2_session_callbacks_new(&callbacks)
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_on_header_callback(callbacks, apnsOnHeader)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, apnsOnDataChunk)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, apnsOnStreamClose)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, apnsOnFrameRecv)
        nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, apnsOnFrameSend)
        var option: OpaquePointer? = nil
        nghttp2_option_new(&option)
        defer { nghttp2_option_del(option) }
        // Assume one stream until the peer's SETTINGS arrive: APNs starts connections at one.
        nghttp2_option_set_peer_max_concurrent_streams(option, 1)
        // Closed streams are kept only for the (deprecated) priority tree, which Herald never
        // uses; without them nghttp2's stream map stays at the streams in flight.
        nghttp2_option_set_no_closed_streams(option, 1)
        var newSession: OpaquePointer? = nil
        var mem = pooledAllocator()
        let rc = nghttp2_session_client_new3(&newSession, callbacks, Unmanaged.passUnretained(self).toOpaque(), option, &mem)
        guard rc == 0, let newSession else { throw .protocolError("nghttp2_session_client_new failed (\(rc))") }
        session = newSession
        windowRoom = Int(nghttp2_session_get_remote_window_size(newSession))
        var settings = [
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_ENABLE_PUSH.rawValue), value: 0),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue), value: 0),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE.rawValue), value: 1 << 20),
            // No RFC 7540 priority tree (RFC 9218's setting; a peer that does not know it ignores
            // it, RFC 9113 6.5.2): nghttp2 then queues each stream's DATA once, first in first
            // out, instead of moving it in the tree's queue after every DATA frame it sends.
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES.rawValue), value: 1),
        ]
        _ = nghttp2_submit_settings(newSession, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, settings.count)
        _ = nghttp2_session_set_local_window_size(newSession, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, 16 << 20)
        if let connectTimer { loop.cancel(connectTimer) }
        connectTimer = nil
        state = .ready
        schedulePing()
        scheduleDeadlineCheck()
        delegate?.connectionIsReady(self)
    }

    // MARK: submitting

    /// Sends one notification on a new stream. Precondition: `streamSlots > 0`.
    /// Returns false (and keeps nothing) if nghttp2 refused the stream.
    @discardableResult
    public func submit(_ request: consuming PendingRequest) -> Bool {
        guard streamSlots > 0, let session, let slotIndex = freeSlotIndices.popLast() else { return false }
        let index = Int(slotIndex)
        // nghttp2 copies the header list, and no callback runs inside submit: the request is moved
        // into its slot afterwards (a move, not a copy: no retain of each of its references).
        let submitted = headers.withHeaders(for: request, authorizationBytes: authorizationBytes) { nva, count in
            var provider = nghttp2_data_provider()
            provider.source.ptr = UnsafeMutableRawPointer(bitPattern: index + 1)
            provider.read_callback = apnsReadPayload
            return nghttp2_submit_request(session, nil, nva, count, &provider, UnsafeMutableRawPointer(bitPattern: index + 1))
        }
        guard let streamID = submitted else {
            // Never sent with a header cut short: this one notification fails on its own, and the
            // connection and its provider token stay untouched.
            slots[index].context = request.context
            slots[index].objectHeaders = request.objectHeaders
            assert(!slots[index].occupied, "a free slot holds no request")
            (requests + index).initialize(to: consume request)
            slots[index].occupied = true
            slots[index].status = 0
            slots[index].failure = nil
            slots[index].notSent = true
            slots[index].uniqueID = nil
            slots[index].streamID = 0
            inFlight += 1
            completed.append(slotIndex)
            scheduleLocalCompletions()
            return true
        }
        if streamID < 0 {
            freeSlotIndices.append(slotIndex)
            if streamID == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE.rawValue {
                // All 2^30 client stream ids are used (about 10 hours at 30,000/s on one
                // connection): retire it like a GOAWAY; the pool opens a fresh one.
                shutdownGracefully()
            }
            return false
        }
        request.submittedAt = loop.now
        slots[index].context = request.context
        // The payload's storage, held by the request's template, neither moves nor changes while
        // the request is in its slot: its address outlives this call.
        let payload = request.source.template.payload.withUnsafeBytes { $0 }
        slots[index].objectHeaders = request.objectHeaders
        slots[index].payload = payload
        unsentPayloadBytes += payload.count
        windowRoom -= payload.count
        prefetchPayload(payload)
        assert(!slots[index].occupied, "a free slot holds no request")
        (requests + index).initialize(to: consume request)
        slots[index].occupied = true
        slots[index].status = 0
        slots[index].body.removeAll(keepingCapacity: true)
        slots[index].payloadOffset = 0
        slots[index].headersSent = false
        slots[index].failure = nil
        slots[index].notSent = false
        slots[index].uniqueID = nil
        slots[index].streamID = streamID
        inFlight += 1
        streamsOpened += 1
        if !tokenUsed && authorization != nil {
            tokenUsed = true
            tokenFirstUsedAt = clock.nowMilliseconds()
        }
        scheduleFlush()
        return true
    }

    // MARK: nghttp2 events (called from the C callbacks below)

    fileprivate func onHeader(streamID: Int32, name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) {
        if name.count == 14, name[5] == 0x75 /* "u" */, APNsConnection.isUniqueIDName(name) {
            guard let index = slotIndex(streamID) else { return }
            slots[index].uniqueID = UUIDBits(uuidText: value)
            return
        }
        guard name.count == 7, name[0] == 0x3A, name[1] == 0x73 /* ":s" */ else { return }
        guard let index = slotIndex(streamID) else { return }
        var status: Int32 = 0
        for byte in value where byte >= 0x30 && byte <= 0x39 { status = status * 10 + Int32(byte - 0x30) }
        slots[index].status = status
    }

    /// Whether a header name (lowercase, as HTTP/2 requires) is `apns-unique-id`.
    private static func isUniqueIDName(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
        let expected: StaticString = "apns-unique-id"
        return expected.withUTF8Buffer { $0.elementsEqual(name) }
    }

    fileprivate func onData(streamID: Int32, bytes: UnsafeBufferPointer<UInt8>) {
        guard let index = slotIndex(streamID) else { return }
        // APNs error bodies are tiny; cap what a misbehaving peer can make Herald hold.
        let room = 4096 - slots[index].body.count
        if room > 0 { slots[index].body.append(contentsOf: bytes.prefix(room)) }
    }

    fileprivate func onStreamClose(streamID: Int32, errorCode: UInt32) {
        guard let index = slotIndex(streamID), slots[index].occupied else { return }
        if slots[index].failure == nil && slots[index].status == 0 {
            if errorCode == UInt32(NGHTTP2_REFUSED_STREAM.rawValue) || !slots[index].headersSent {
                slots[index].failure = streamID > goAwayLastStreamID ? .goAway(notProcessed: true) : .refusedStream
            } else {
                slots[index].failure = .streamReset(errorCode: errorCode)
            }
        }
        completed.append(Int32(index))
        // A stream Herald reset itself closes while its RST_STREAM is sent (in a flush, not in
        // input processing): hand it out on the next loop turn.
        if case .responseTimeout? = slots[index].failure { scheduleLocalCompletions() }
    }

    fileprivate func onFrameSend(type: UInt8, streamID: Int32) {
        if type == UInt8(NGHTTP2_HEADERS.rawValue), let index = slotIndex(streamID) {
            slots[index].headersSent = true
        }
    }

    fileprivate func onFrameRecv(_ frame: UnsafePointer<nghttp2_frame>) {
        let type = frame.pointee.hd.type
        if type == UInt8(NGHTTP2_SETTINGS.rawValue), frame.pointee.hd.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) == 0, let session {
            let limit = nghttp2_session_get_remote_settings(session, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS)
            peerMaxConcurrentStreams = Int(min(limit, UInt32(Int32.max)))
        } else if type == UInt8(NGHTTP2_GOAWAY.rawValue) {
            let goaway = frame.pointee.goaway
            goAwayLastStreamID = goaway.last_stream_id
            var reason: String? = nil
            if let data = goaway.opaque_data, goaway.opaque_data_len > 0 {
                let body = UnsafeRawBufferPointer(start: data, count: goaway.opaque_data_len)
                reason = APNsErrorBody.parse(body).reason?.rawValue
            }
            goAwayInfo = (goaway.error_code, reason)
            if state == .ready || state == .connecting {
                state = .goingAway
                goingAwayToReport = true
            }
        }
        pingSentAt = nil
    }

    private func slotIndex(_ streamID: Int32) -> Int? {
        guard let session, let pointer = nghttp2_session_get_stream_user_data(session, streamID) else { return nil }
        return Int(bitPattern: pointer) - 1
    }

    fileprivate func readPayload(slot index: Int, into buffer: UnsafeMutablePointer<UInt8>, length: Int, flags: UnsafeMutablePointer<UInt32>) -> Int {
        // From the bytes noted at submit, read in place through the buffer's addressor: the
        // request is not touched (reading its payload retained and released the storage, per
        // DATA frame), nor copied (binding the slot copied all of it). An emptied slot (no
        // request) has no bytes: its stream ends.
        let (payload, offset) = (slots[index].payload, slots[index].payloadOffset)
        let count = max(0, min(length, payload.count - offset))
        if count > 0 { UnsafeMutableRawPointer(buffer).copyMemory(from: payload.baseAddress! + offset, byteCount: count) }
        slots[index].payloadOffset = offset + count
        unsentPayloadBytes -= count
        if offset + count >= payload.count { flags.pointee |= UInt32(NGHTTP2_DATA_FLAG_EOF.rawValue) }
        return count
    }

    // MARK: completions

    override func sessionProcessedInput() {
        if goingAwayToReport {
            goingAwayToReport = false
            delegate?.connectionIsGoingAway(self)
        }
        if let session { windowRoom = Int(nghttp2_session_get_remote_window_size(session)) - unsentPayloadBytes }
        drainCompletions()
        if state == .goingAway, inFlight == 0 {
            terminate(goAwayInfo.map { .goAway(errorCode: $0.code, reason: $0.reason) } ?? .closedLocally)
        }
    }

    private func drainCompletions() {
        if completed.isEmpty {
            delegate?.connectionSlotsChanged(self)
            return
        }
        // Completions are handed out after nghttp2 returned, so the delegate may submit at once.
        // The weak delegate is loaded once per drain, and the whole batch goes to it in one call:
        // calling it once per completion retained and released it each time, and the pool has
        // weak references (a side table), so each of those took the runtime's slow path.
        let delegate = self.delegate
        if completed.count - completedNext > 1 { prefetchCompletions() }
        var request: PendingRequest?
        if let delegate {
            delegate.connectionHasCompletions(self)
            while let outcome = nextCompletion(into: &request) {
                delegate.connection(self, completed: request.take()!, outcome: outcome)
            }
        } else {
            while nextCompletion(into: &request) != nil {}
        }
        completed.removeAll(keepingCapacity: true)
        completedNext = 0
        delegate?.connectionSlotsChanged(self)
    }

    /// Moves the next request of the batch being handed out into `request` (its slot is free
    /// again) and returns its outcome; nil when the batch is done. For the delegate, inside
    /// `connectionHasCompletions`. The caller's variable is filled in place, not returned: a
    /// returned request was moved two or three more times on the way (about 200 bytes each).
    public func nextCompletion(into request: inout PendingRequest?) -> DeliveryOutcome? {
        while completedNext < completed.count {
            let slotIndex = Int(completed[completedNext])
            completedNext += 1
            // Moved out of the slot, not copied: no retain and release of each of its references.
            // A slot completed twice (a close inside a batch) is handed out once.
            guard slots[slotIndex].occupied else { continue }
            slots[slotIndex].occupied = false
            request = (requests + slotIndex).move()
            // A stream reset or refused before all its DATA left: those bytes will never be sent.
            let abandoned = max(0, slots[slotIndex].payload.count - slots[slotIndex].payloadOffset)
            unsentPayloadBytes -= abandoned
            windowRoom += abandoned
            slots[slotIndex].payload = UnsafeRawBufferPointer(start: nil, count: 0)
            request!.uniqueID = slots[slotIndex].uniqueID
            inFlight -= 1
            assert(inFlight > 0 || unsentPayloadBytes == 0, "unsent payload bytes with no stream in flight: \(unsentPayloadBytes)")
            freeSlotIndices.append(Int32(slotIndex))
            let outcome: DeliveryOutcome
            if slots[slotIndex].notSent {
                slots[slotIndex].notSent = false
                outcome = .permanent(status: 0, reason: .requestHeadersTooLarge)
            } else if let failure = slots[slotIndex].failure {
                outcome = .retryOnAnotherConnection(failure)
            } else if slots[slotIndex].status == 200 {
                // What `classify` answers for 200 whatever the body; the body is not touched (a
                // retain and a release of its array per answer).
                outcome = .accepted
            } else {
                outcome = slots[slotIndex].body.withUnsafeBytes {
                    ResponseClassifier.classify(status: Int(slots[slotIndex].status), body: $0)
                }
            }
            return outcome
        }
        return nil
    }

    /// Starts loading the payload's first lines, which its DATA frame copies when the tick ends:
    /// read when the job was decoded, long before, they have left the caches by then, and the
    /// copy waited on each line in turn.
    @inline(__always)
    private func prefetchPayload(_ payload: UnsafeRawBufferPointer) {
        guard let base = payload.baseAddress, !payload.isEmpty else { return }
        // Past about 8 lines the copy's own sequential reads keep ahead of it.
        let end = min(payload.count, 512)
        var offset = 0
        while offset < end {
            prefetchForRead(base + offset)
            offset += 64
        }
        prefetchForRead(base + (end - 1))
    }

    /// With thousands of streams in flight, what a completion touches has left the caches by the
    /// time its answer comes: its slot, the headers of the objects its request releases, and the
    /// caller's state behind its context. All of it is requested for the whole batch first, so
    /// the loads overlap instead of each completion waiting on its own.
    private func prefetchCompletions() {
        let lines = (MemoryLayout<Slot>.stride + 63) / 64 + 1
        let requestLines = (MemoryLayout<PendingRequest>.stride + 63) / 64 + 1
        let batch = completed[completedNext...]
        for slotIndex in batch {
            let slot = UnsafeRawPointer(slots + Int(slotIndex))
            for line in 0..<lines { prefetchForWrite(slot + 64 * line) }
            let request = UnsafeRawPointer(requests + Int(slotIndex))
            for line in 0..<requestLines { prefetchForRead(request + 64 * line) }
        }
        completedContexts.removeAll(keepingCapacity: true)
        // Field by field: a copy of the slot would retain its request's references.
        for slotIndex in batch {
            let headers = slots[Int(slotIndex)].objectHeaders
            if let source = headers.source { prefetchForWrite(source) }
            if let token = headers.token { prefetchForWrite(token) }
            completedContexts.append(slots[Int(slotIndex)].context)
        }
        if let prefetcher { completedContexts.withUnsafeBufferPointer { prefetcher.prefetch(contexts: $0) } }
    }

    override func didClose(_ error: ConnectionError?) {
        state = .closed
        if let connectTimer { loop.cancel(connectTimer) }
        if let pingTimer { loop.cancel(pingTimer) }
        if let deadlineTimer { loop.cancel(deadlineTimer) }
        connectTimer = nil
        pingTimer = nil
        deadlineTimer = nil
        // Everything still held goes back to the caller as retryable; unsent streams were never
        // seen by the server and do not count as an attempt.
        for index in 0..<maxStreams where slots[index].occupied {
            if !completed.contains(Int32(index)) {
                slots[index].failure = slots[index].headersSent ? .connectionLost : .goAway(notProcessed: true)
                completed.append(Int32(index))
            } else if slots[index].failure == nil && slots[index].status == 0 {
                slots[index].failure = .connectionLost
            }
        }
        let delegate = self.delegate
        drainCompletions()
        delegate?.connectionClosed(self, error: error)
    }

    // MARK: local completions and response deadlines

    /// Hands out completions made outside nghttp2's input processing (requests never sent) on
    /// the next loop turn, never from inside the caller's `submit`.
    private func scheduleLocalCompletions() {
        guard !localCompletionsScheduled else { return }
        localCompletionsScheduled = true
        _ = loop.schedule(afterMilliseconds: 0) { [weak self] in
            guard let self else { return }
            self.localCompletionsScheduled = false
            if !self.completed.isEmpty { self.drainCompletions() }
        }
    }

    private func scheduleDeadlineCheck() {
        let interval = max(10, min(1_000, responseTimeoutMilliseconds / 4))
        deadlineTimer = loop.schedule(afterMilliseconds: interval) { [weak self] in
            self?.checkDeadlines()
        }
    }

    /// Resets every stream whose answer is overdue (one scan of the slots a period, no timer per
    /// stream); nghttp2 then closes it and `onStreamClose` completes it as `.responseTimeout`.
    private func checkDeadlines() {
        guard isOpen, let session else { return }
        if inFlight > 0 {
            let oldestAllowed = loop.now - responseTimeoutMilliseconds
            var reset = false
            for index in 0..<maxStreams where slots[index].occupied && slots[index].failure == nil && !slots[index].notSent {
                guard requests[index].submittedAt <= oldestAllowed else { continue }
                slots[index].failure = .responseTimeout
                if nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), slots[index].streamID,
                                             UInt32(NGHTTP2_CANCEL.rawValue)) == 0 {
                    reset = true
                } else {
                    // nghttp2 no longer knows the stream: complete it here.
                    completed.append(Int32(index))
                    scheduleLocalCompletions()
                }
            }
            if reset { scheduleFlush() }
        }
        // A peer that takes DATA but never opens its window again would leave the connection
        // with no stream slot for good (`streamSlots`): once no stream is open and the window has
        // stayed shut for a response timeout, the connection is closed, and the pool opens a
        // fresh one (with a fresh window) in its place.
        if windowRoom <= 0 && inFlight == 0 {
            let since = windowShutSince ?? loop.now
            windowShutSince = since
            if loop.now - since >= responseTimeoutMilliseconds {
                terminate(.timedOut("waiting for the peer to open its flow-control window (\(loop.now - since) ms with no stream open)"))
                return
            }
        } else {
            windowShutSince = nil
        }
        scheduleDeadlineCheck()
    }

    /// When the deadline check first saw the window shut with no stream open (see `checkDeadlines`).
    private var windowShutSince: Int64?

    // MARK: liveness

    private func schedulePing() {
        pingTimer = loop.schedule(afterMilliseconds: pingIntervalMilliseconds / 2) { [weak self] in
            self?.checkLiveness()
        }
    }

    private func checkLiveness() {
        guard isOpen, let session else { return }
        if let sentAt = pingSentAt {
            if loop.now - sentAt >= pingTimeoutMilliseconds {
                terminate(.pingUnanswered)
                return
            }
        } else if loop.now - lastReadAt >= pingIntervalMilliseconds {
            pingSentAt = loop.now
            _ = nghttp2_submit_ping(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), nil)
            scheduleFlush()
        }
        pingTimer = loop.schedule(afterMilliseconds: pingSentAt == nil ? pingIntervalMilliseconds / 2 : pingTimeoutMilliseconds) { [weak self] in
            self?.checkLiveness()
        }
    }
}

// MARK: - nghttp2 callbacks (C function pointers: no captures; `self` travels as user data)

@inline(__always)
private func withConnection<R>(_ userData: UnsafeMutableRawPointer?, _ body: (APNsConnection) -> R) -> R {
    withUnretained(userData, body)
}

private let apnsOnHeader: nghttp2_on_header_callback = { _, frame, name, nameLength, value, valueLength, _, userData in
    guard let frame, frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue) else { return 0 }
    withConnection(userData) { $0.onHeader(
        streamID: frame.pointee.hd.stream_id,
        name: UnsafeBufferPointer(start: name, count: nameLength),
        value: UnsafeBufferPointer(start: value, count: valueLength)) }
    return 0
}

private let apnsOnDataChunk: nghttp2_on_data_chunk_recv_callback = { _, _, streamID, data, length, userData in
    withConnection(userData) { $0.onData(streamID: streamID, bytes: UnsafeBufferPointer(start: data, count: length)) }
    return 0
}

private let apnsOnStreamClose: nghttp2_on_stream_close_callback = { _, streamID, errorCode, userData in
    withConnection(userData) { $0.onStreamClose(streamID: streamID, errorCode: errorCode) }
    return 0
}

private let apnsOnFrameRecv: nghttp2_on_frame_recv_callback = { _, frame, userData in
    if let frame { withConnection(userData) { $0.onFrameRecv(frame) } }
    return 0
}

private let apnsOnFrameSend: nghttp2_on_frame_send_callback = { _, frame, userData in
    if let frame { withConnection(userData) { $0.onFrameSend(type: frame.pointee.hd.type, streamID: frame.pointee.hd.stream_id) } }
    return 0
}

private let apnsReadPayload: nghttp2_data_source_read_callback = { _, _, buffer, length, flags, source, userData in
    let slot = Int(bitPattern: source!.pointee.ptr) - 1
    return withConnection(userData) { $0.readPayload(slot: slot, into: buffer!, length: length, flags: flags!) }
}
