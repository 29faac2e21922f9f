import CHeraldShims
import CNGHTTP2
import COpenSSL
import Glibc

/// Why an HTTP/2 connection ended.
public enum ConnectionError: Error, CustomStringConvertible, Sendable {
    case connectFailed(SystemError)
    case tls(TLSError)
    case timedOut(String)
    case closedByPeer
    case protocolError(String)
    case goAway(errorCode: UInt32, reason: String?)
    case pingUnanswered
    case closedLocally

    public var description: String {
        switch self {
        case .connectFailed(let error): return error.description
        case .tls(let error): return error.description
        case .timedOut(let what): return "timed out \(what)"
        case .closedByPeer: return "the peer closed the connection"
        case .protocolError(let message): return "HTTP/2 protocol error: \(message)"
        case .goAway(let code, let reason):
            return "the peer sent GOAWAY (error code \(code)\(reason.map { ", reason \($0)" } ?? ""))"
        case .pingUnanswered: return "the peer did not answer a PING: the connection is dead"
        case .closedLocally: return "closed by Herald"
        }
    }
}

/// The I/O pump shared by Herald's HTTP/2 client and server connections: a non-blocking socket,
/// its TLS session and an nghttp2 session, driven by one `EventLoop`.
///
/// Input is decrypted into one reusable buffer and fed to `nghttp2_session_mem_recv`; output
/// produced by `nghttp2_session_mem_send` is gathered into one buffer per tick and written as
/// few TLS records as possible. Write interest is on only while bytes are pending. Subclasses
/// install their nghttp2 callbacks and react to `sessionProcessedInput()` and `didClose(_:)`.
public class HTTP2Endpoint: IOHandler, TickObserver {
    public let loop: EventLoop
    public let host: String
    var fd: Int32 = -1
    var tls: TLSStream?
    var session: OpaquePointer?
    private(set) public var isOpen = false
    private var handshaking = false
    private var flushScheduled = false
    private var readBuffer: UnsafeMutableRawBufferPointer
    private var outBuffer: [UInt8] = []
    private var outOffset = 0
    private var tlsWantsWriteForRead = false
    /// Monotonic time of the last byte read: the liveness signal for PINGs.
    public private(set) var lastReadAt: Int64 = 0
    /// Free lists for this endpoint's nghttp2 session (see `herald_pool_new`); outlives it.
    let memoryPool: OpaquePointer = herald_pool_new()

    static let outBufferTarget = 64 * 1024

    init(loop: EventLoop, host: String) {
        self.loop = loop
        self.host = host
        readBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
        outBuffer.reserveCapacity(HTTP2Endpoint.outBufferTarget + 16 * 1024)
    }

    deinit {
        readBuffer.deallocate()
        if let session { nghttp2_session_del(session) }
        herald_pool_delete(memoryPool)
        if fd >= 0 { close(fd) }
    }

    /// Whether a graceful close waits for the peer's FIN (`LingeringClose`) instead of closing at
    /// once. Servers do: their peer keeps writing until it reads the GOAWAY.
    var lingersOnClose: Bool { false }

    /// The allocator to create this endpoint's nghttp2 session with: blocks recycled on this loop.
    func pooledAllocator() -> nghttp2_mem {
        var mem = nghttp2_mem()
        herald_pool_nghttp2_mem(memoryPool, &mem)
        return mem
    }

    /// Blocks of the nghttp2 session still allocated (0 once it was deleted) and bytes parked in
    /// its free lists. For tests.
    var poolUsage: (liveBlocks: Int, heldBytes: Int) {
        (herald_pool_live_blocks(memoryPool), herald_pool_held_bytes(memoryPool))
    }

    /// Adopts a connected socket and begins the TLS handshake.
    func adopt(fd: Int32, context: TLSContext) throws(ConnectionError) {
        self.fd = fd
        do {
            tls = try TLSStream(context: context, fd: fd, host: host)
        } catch {
            throw .tls(error)
        }
        handshaking = true
        isOpen = true
        lastReadAt = loop.now
        do {
            try loop.register(fd, handler: self, interest: [.read, .write])
        } catch {
            throw .connectFailed(error)
        }
    }

    /// True when the peer presented a verified certificate during the handshake.
    public private(set) var peerCertificateVerified = false

    /// Called once TLS is up: the subclass creates its nghttp2 session and queues its preface.
    func tlsEstablished() throws(ConnectionError) {}
    /// Called after a batch of input went through nghttp2 (and after every flush of output).
    func sessionProcessedInput() {}
    /// Called exactly once when the connection is gone; the descriptor is already closed.
    func didClose(_ error: ConnectionError?) {}

    // MARK: IOHandler

    public func readable() {
        if handshaking { continueHandshake(); return }
        guard isOpen, let tls, let session else { return }
        lastReadAt = loop.now
        while isOpen {
            switch tls.read(into: readBuffer) {
            case .bytes(let count):
                let consumed = nghttp2_session_mem_recv(session, readBuffer.baseAddress!.assumingMemoryBound(to: UInt8.self), count)
                if consumed < 0 {
                    let message = String(cString: nghttp2_strerror(Int32(consumed)))
                    sessionProcessedInput()
                    terminate(.protocolError(message))
                    return
                }
            case .wantRead:
                sessionProcessedInput()
                scheduleFlush()
                return
            case .wantWrite:
                tlsWantsWriteForRead = true
                loop.setInterest(fd, [.read, .write])
                sessionProcessedInput()
                return
            case .closed:
                sessionProcessedInput()
                terminate(.closedByPeer)
                return
            }
        }
    }

    public func writable() {
        if handshaking { continueHandshake(); return }
        if tlsWantsWriteForRead {
            tlsWantsWriteForRead = false
            readable()
        }
        flush()
    }

    // MARK: handshake

    private func continueHandshake() {
        guard let tls else { return }
        do {
            switch try tls.handshake() {
            case .wantRead:
                loop.setInterest(fd, .read)
            case .wantWrite:
                loop.setInterest(fd, [.read, .write])
            case .done:
                handshaking = false
                loop.setInterest(fd, .read)
                peerCertificateVerified = tls.peerCertificateVerified
                try tlsEstablished()
                flush()
                // Bytes may already be decrypted and waiting (the server's SETTINGS).
                readable()
            }
        } catch let error as TLSError {
            terminate(.tls(error))
        } catch let error as ConnectionError {
            terminate(error)
        } catch {
            terminate(.protocolError("\(error)"))
        }
    }

    // MARK: output

    /// Asks for one flush at the end of this loop iteration, so many submitted streams share writes.
    public func scheduleFlush() {
        if flushScheduled || !isOpen { return }
        flushScheduled = true
        loop.callAtEndOfTick(self)
    }

    public func endOfTick() {
        flushScheduled = false
        flush()
    }

    /// Moves nghttp2's pending frames into TLS until either runs dry or the socket is full.
    func flush() {
        guard isOpen, !handshaking, let tls, let session else { return }
        while true {
            if outOffset == outBuffer.count {
                outBuffer.removeAll(keepingCapacity: true)
                outOffset = 0
                while outBuffer.count < HTTP2Endpoint.outBufferTarget {
                    var data: UnsafePointer<UInt8>? = nil
                    let length = nghttp2_session_mem_send(session, &data)
                    if length < 0 {
                        terminate(.protocolError(String(cString: nghttp2_strerror(Int32(length)))))
                        return
                    }
                    if length == 0 { break }
                    outBuffer.append(contentsOf: UnsafeBufferPointer(start: data, count: length))
                }
                if outBuffer.isEmpty { break }
            }
            let result = outBuffer.withUnsafeBytes { bytes in
                tls.write(UnsafeRawBufferPointer(rebasing: bytes[outOffset...]))
            }
            switch result {
            case .bytes(let count):
                outOffset += count
            case .wantWrite, .wantRead:
                loop.setInterest(fd, [.read, .write])
                return
            case .closed:
                terminate(.closedByPeer)
                return
            }
        }
        loop.setInterest(fd, .read)
        if nghttp2_session_want_read(session) == 0 && nghttp2_session_want_write(session) == 0 {
            // Both sides are done (GOAWAY exchanged and every stream closed).
            terminate(nil)
        }
    }

    // MARK: in memory (benchmarks and tests)

    /// Starts the nghttp2 session with no socket and no TLS, as if a handshake had just finished,
    /// so that two endpoints can be wired back to back in memory with `receiveInMemory` and
    /// `sendInMemory`. A seam for the micro-benchmarks (`Benchmarks/`): production code never
    /// calls it. Scheduled flushes find no TLS stream and do nothing; the caller pumps instead.
    @_spi(Benchmarks)
    public func startInMemory() throws(ConnectionError) {
        precondition(fd < 0 && tls == nil && session == nil, "startInMemory on a connection that has a socket")
        isOpen = true
        lastReadAt = loop.now
        try tlsEstablished()
    }

    /// Feeds bytes the peer "sent" to nghttp2, then lets the subclass react (completions, requests).
    @_spi(Benchmarks)
    public func receiveInMemory(_ bytes: UnsafeRawBufferPointer) {
        guard isOpen, let session, bytes.count > 0 else { return }
        let consumed = nghttp2_session_mem_recv(session, bytes.baseAddress!.assumingMemoryBound(to: UInt8.self), bytes.count)
        sessionProcessedInput()
        if consumed < 0 { terminate(.protocolError(String(cString: nghttp2_strerror(Int32(consumed))))) }
    }

    /// Hands every frame nghttp2 has ready to `sink`, chunk by chunk (each valid only during the
    /// call), and returns the byte count. Stands in for `flush()` when there is no socket.
    @_spi(Benchmarks)
    @discardableResult
    public func sendInMemory(_ sink: (UnsafeRawBufferPointer) -> Void) -> Int {
        guard isOpen, let session else { return 0 }
        var total = 0
        while true {
            var data: UnsafePointer<UInt8>? = nil
            let length = nghttp2_session_mem_send(session, &data)
            if length <= 0 { break }
            sink(UnsafeRawBufferPointer(start: data, count: length))
            total += length
        }
        return total
    }

    // MARK: closing

    /// Closes the connection at once; in-flight work is the subclass's to account for in `didClose`.
    public func terminate(_ error: ConnectionError?) {
        guard isOpen || handshaking else { return }
        isOpen = false
        handshaking = false
        if fd >= 0 {
            loop.deregister(fd)
            if error == nil || error.map({ if case .closedLocally = $0 { return true } else { return false } }) == true {
                tls?.shutdown()
            }
            if error == nil && lingersOnClose {
                // Done by protocol (GOAWAY exchanged, every stream answered) while the peer may
                // still be writing: close without an RST that would discard the last answers.
                LingeringClose.start(loop: loop, fd: fd)
            } else {
                close(fd)
            }
            fd = -1
        }
        didClose(error)
        if let session {
            nghttp2_session_del(session)
            self.session = nil
        }
        tls = nil
    }
}

/// Runs `body` on the object a C library hands back as user data, without retaining it. Only for
/// callbacks made while the object is inside a call into that library (an nghttp2 session or a
/// hiredis reader it owns), so the object outlives the callback. Saves a retain and a release
/// per callback, which for an object with weak references take the runtime's slow path.
@inline(__always)
func withUnretained<Object: AnyObject, Result>(_ userData: UnsafeMutableRawPointer?, _ body: (Object) -> Result) -> Result {
    Unmanaged<Object>.fromOpaque(userData!)._withUnsafeGuaranteedRef(body)
}
