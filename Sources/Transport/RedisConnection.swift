import APNs
import Glibc

/// One reply from Redis, converted from hiredis' reply tree.
public enum RedisReply: Sendable, Equatable {
    case status(String)
    case error(String)
    case integer(Int64)
    case bulk([UInt8])
    case null
    case array([RedisReply])

    /// The reply as text (bulk or status), or nil.
    public var string: String? {
        switch self {
        case .bulk(let bytes): return String(decoding: bytes, as: UTF8.self)
        case .status(let text): return text
        default: return nil
        }
    }

    public var integer: Int64? {
        if case .integer(let value) = self { return value }
        if case .bulk = self, let text = string { return Int64(text) }
        return nil
    }

    public var array: [RedisReply]? {
        if case .array(let elements) = self { return elements }
        return nil
    }

    public var isError: Bool {
        if case .error = self { return true }
        return false
    }
}

extension Result where Success == RedisReply {
    /// The integer reply, if this is one.
    public var integerValue: Int64? {
        if case .success(let reply) = self { return reply.integer }
        return nil
    }

    public var isSuccess: Bool {
        if case .success(let reply) = self { return !reply.isError }
        return false
    }
}

/// What went wrong talking to Redis.
public enum RedisError: Error, CustomStringConvertible, Sendable, Equatable {
    case connectFailed(String)
    case connectionLost(String)
    case protocolError(String)
    /// Redis answered the command with an error reply (e.g. NOGROUP, WRONGTYPE).
    case server(String)
    /// Redis refused the credentials (WRONGPASS), or wants some and got none (NOAUTH). The text is
    /// Redis' own answer, which never repeats the password.
    case authenticationFailed(String)
    /// The Redis URL (or host and port) cannot be used; says which part, never the password.
    case invalidURL(String)

    public var description: String {
        switch self {
        case .authenticationFailed(let message):
            return "Redis refused authentication: \(message)"
        case .invalidURL(let message): return "invalid Redis URL: \(message)"
        case .connectFailed(let message): return "cannot connect to Redis: \(message)"
        case .connectionLost(let message): return "lost the connection to Redis: \(message)"
        case .protocolError(let message): return "Redis protocol error: \(message)"
        case .server(let message): return "Redis error: \(message)"
        }
    }
}

/// Hears when a `RedisConnection` is usable and when it is gone.
public protocol RedisConnectionDelegate: AnyObject {
    func redisConnectionIsReady(_ connection: RedisConnection)
    func redisConnectionClosed(_ connection: RedisConnection, error: RedisError)
}

/// One pipelined connection to Redis on an `EventLoop`.
///
/// Commands are encoded as RESP straight into one output buffer and written once per loop
/// iteration, so a batch of acknowledgements costs one write; replies are parsed by Herald's
/// RESP reader and handed to each command's completion in order. Loop-confined. When the
/// connection drops, every pending completion gets `.connectionLost`; reconnecting is the
/// owner's decision.
///
/// An endpoint with `tls` set (`rediss://`) is reached through Herald's own OpenSSL stream: the
/// TLS handshake runs non-blocking on the loop after the TCP connect, and AUTH/SELECT/PING and
/// everything queued meanwhile go out once it is done. Whoever creates connections from an
/// endpoint (the worker, the tools, a resolver) gets TLS without knowing about it.
public final class RedisConnection: IOHandler, TickObserver {
    public typealias Completion = (Result<RedisReply, RedisError>) -> Void
    /// Gets the reply as the connection's tape, valid only during the call (no copy of the reply).
    public typealias RawCompletion = (Result<RedisReplyTape, RedisError>) -> Void

    enum Pending {
        case reply(Completion?)
        case raw(RawCompletion)

        func fail(_ error: RedisError) {
            switch self {
            case .reply(let completion): completion?(.failure(error))
            case .raw(let completion): completion(.failure(error))
            }
        }
    }

    public let loop: EventLoop
    public let endpoint: RedisEndpoint
    public weak var delegate: (any RedisConnectionDelegate)?
    /// Gets replies that no command is waiting for: the messages of a `SUBSCRIBE`d connection.
    /// Nil (everywhere but the Sentinel watcher): such a reply is a protocol error.
    public var onUnsolicitedReply: ((RedisReply) -> Void)?
    public private(set) var isReady = false
    private var fd: Int32 = -1
    private var connecting = false
    private var reader: RESPReader?
    private var output: [UInt8] = []
    private var outputOffset = 0
    private var completions: [Pending] = []
    private let tape = RedisReplyTape()
    private var completionHead = 0
    private var flushScheduled = false
    private var readBuffer = [UInt8](repeating: 0, count: 64 * 1024)
    private var closed = false
    private var connectTimer: EventLoop.TimerID?
    /// Whether `connect()` ran (a connection connects once).
    private var started = false
    /// Handshake commands (AUTH, SELECT or PING) not yet answered.
    private var handshakeReplies = 0
    /// The OpenSSL client context of a `rediss://` endpoint, built at `connect()`.
    private var tlsContext: TLSContext?
    /// The TLS session, once TCP is connected (`rediss://` only).
    private var tls: TLSStream?
    private var tlsHandshaking = false
    /// OpenSSL needs the socket writable to go on reading (a renegotiation or key update).
    private var tlsWantsWriteForRead = false
    /// Whether any reply arrived on this connection (a close before the first one, on a plain
    /// connection, is what a TLS port does with plain text).
    private var answered = false

    public init(loop: EventLoop, endpoint: RedisEndpoint) {
        self.loop = loop
        self.endpoint = endpoint
        output.reserveCapacity(64 * 1024)
    }

    deinit {
        if fd >= 0 { Glibc.close(fd) }
    }

    /// Starts connecting; AUTH and SELECT (or a PING when neither is needed) are pipelined ahead
    /// of anything sent meanwhile, and the connection is ready only once Redis answered them.
    ///
    /// A failure here (a name that does not resolve, no descriptor left) reaches the delegate on
    /// the next loop turn, never from inside this call. A connection connects once: calling this
    /// again, or after `close()`, does nothing.
    public func connect() {
        guard fd < 0, !closed, !started else { return }
        started = true
        // The handshake goes first, whatever callers send before the connection is ready.
        let queued = output
        output.removeAll(keepingCapacity: true)
        let queuedCompletions = completions
        completions.removeAll(keepingCapacity: true)
        queueHandshake()
        output.append(contentsOf: queued)
        completions.append(contentsOf: queuedCompletions)
        connectTimer = loop.schedule(afterMilliseconds: connectTimeoutMilliseconds) { [weak self] in
            guard let self, !self.isReady, !self.closed else { return }
            if self.tlsHandshaking {
                // A plain Redis reads a ClientHello as an inline command and waits for its end.
                self.fail(.connectFailed("\(self.endpoint): no TLS answer within \(self.connectTimeoutMilliseconds) ms: \(RedisTLSAdvice.notTLS)"))
            } else {
                self.fail(.connectFailed("\(self.endpoint): no answer within \(self.connectTimeoutMilliseconds) ms"))
            }
        }
        if let problem = RedisEndpoint.problem(withHost: endpoint.host) {
            failSoon(.invalidURL(problem))
            return
        }
        guard (1...65535).contains(endpoint.port) else {
            failSoon(.invalidURL("the Redis port must be 1 to 65535, not \(endpoint.port)"))
            return
        }
        if let settings = endpoint.tls {
            do {
                tlsContext = try settings.makeContext()
            } catch {
                failSoon(.connectFailed("\(endpoint): \(error)"))
                return
            }
        }
        do {
            fd = try Socket.startConnect(host: endpoint.host, port: endpoint.port)
            try loop.register(fd, handler: self, interest: [.read, .write])
        } catch {
            if fd >= 0 { Glibc.close(fd); fd = -1 }
            failSoon(.connectFailed("\(endpoint): \(error)"))
            return
        }
        reader = RESPReader(tape: tape)
        connecting = true
    }

    /// How long connecting and the handshake may take before the attempt counts as failed.
    public var connectTimeoutMilliseconds: Int64 = 5_000

    /// AUTH and SELECT as the endpoint asks, else PING: each answer is checked, and the last one
    /// makes the connection ready. A Redis that wants a password and got none says NOAUTH to
    /// whichever comes first.
    private func queueHandshake() {
        if let password = endpoint.password {
            let arguments: [String] = endpoint.user.map { ["AUTH", $0, password] } ?? ["AUTH", password]
            handshakeReplies += 1
            send(arguments) { [weak self] result in self?.handshakeAnswered(result, command: "AUTH") }
        }
        if endpoint.database != 0 {
            handshakeReplies += 1
            send(["SELECT", String(endpoint.database)]) { [weak self] result in self?.handshakeAnswered(result, command: "SELECT") }
        }
        if handshakeReplies == 0 {
            handshakeReplies = 1
            send(["PING"]) { [weak self] result in self?.handshakeAnswered(result, command: "PING") }
        }
    }

    private func handshakeAnswered(_ result: Result<RedisReply, RedisError>, command: String) {
        guard !closed else { return }
        switch result {
        case .success(.error(let message)):
            if command == "AUTH" || message.hasPrefix("NOAUTH") || message.hasPrefix("WRONGPASS") {
                fail(.authenticationFailed(message))
            } else if command == "SELECT" {
                fail(.connectFailed("SELECT \(endpoint.database) failed: \(message)"))
            } else {
                fail(.connectFailed("\(command) failed: \(message)"))
            }
        case .success:
            handshakeReplies -= 1
            if handshakeReplies == 0 {
                if let connectTimer { loop.cancel(connectTimer) }
                connectTimer = nil
                isReady = true
                delegate?.redisConnectionIsReady(self)
            }
        case .failure:
            break  // fail() already told the delegate
        }
    }

    /// Fails on the next loop turn, so that the delegate never hears of it inside `connect()`
    /// (the worker replaces both of its connections when one fails, while it is still connecting
    /// the second).
    private func failSoon(_ error: RedisError) {
        loop.schedule(afterMilliseconds: 0) { [weak self] in self?.fail(error) }
    }

    /// Closes the connection; pending completions get `.connectionLost`.
    public func close() {
        fail(.connectionLost("closed by Herald"))
    }

    /// Commands sent but not yet answered.
    public var pendingReplies: Int { completions.count - completionHead }

    // MARK: sending

    /// Queues one command (written at the end of this loop iteration).
    public func send(_ arguments: [String], _ completion: Completion? = nil) {
        beginCommand(count: arguments.count)
        for argument in arguments { appendArgument(argument) }
        endCommand(completion)
    }

    /// Queues one command of mixed text, byte and integer arguments.
    public func send(_ arguments: [RedisArgument], _ completion: Completion? = nil) {
        beginCommand(count: arguments.count)
        for argument in arguments {
            switch argument {
            case .text(let text): appendArgument(text)
            case .bytes(let bytes): appendArgument(bytes)
            case .integer(let value): appendArgument(integer: value)
            }
        }
        endCommand(completion)
    }

    /// Queues one command built by `build`, which appends arguments to `RedisCommandBuilder`.
    public func send(argumentCount: Int, _ build: (inout RedisCommandBuilder) -> Void, _ completion: Completion? = nil) {
        appendCommand(argumentCount: argumentCount, build)
        endCommand(completion)
    }

    /// Writes one command of `argumentCount` arguments, appended by `build`.
    private func appendCommand(argumentCount: Int, _ build: (inout RedisCommandBuilder) -> Void) {
        beginCommand(count: argumentCount)
        var builder = RedisCommandBuilder(connection: self)
        build(&builder)
        precondition(builder.written == argumentCount, "RESP argument count mismatch: declared \(argumentCount), wrote \(builder.written)")
    }

    func beginCommand(count: Int) {
        output.append(0x2A)  // *
        appendDecimal(count)
        output.append(0x0D); output.append(0x0A)
    }

    func appendArgument(_ bytes: UnsafeRawBufferPointer) {
        output.append(0x24)  // $
        appendDecimal(bytes.count)
        output.append(0x0D); output.append(0x0A)
        output.append(contentsOf: bytes)
        output.append(0x0D); output.append(0x0A)
    }

    func appendArgument(_ string: String) {
        var string = string
        string.withUTF8 { appendArgument(UnsafeRawBufferPointer($0)) }
    }

    func appendArgument(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { appendArgument($0) }
    }

    func appendArgument(integer: Int64) {
        let length = (integer < 0 ? 1 : 0) + RedisConnection.decimalLength(integer.magnitude)
        output.append(0x24)  // $
        appendDecimal(length)
        output.append(0x0D); output.append(0x0A)
        if integer < 0 { output.append(0x2D) }
        appendDecimal(integer.magnitude)
        output.append(0x0D); output.append(0x0A)
    }

    /// `<milliseconds>-<sequence>` as one argument (a stream entry id), written without a String:
    /// `$<length>\r\n<ms>-<seq>\r\n` is laid out backwards in a stack buffer (48 bytes at most)
    /// and appended in one piece, once per id of every XACK and XDEL.
    func appendArgument(entryMilliseconds milliseconds: UInt64, sequence: UInt64) {
        var buffer: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &buffer) { raw in
            var start = raw.count
            func put(_ byte: UInt8) {
                start -= 1
                raw[start] = byte
            }
            func putDecimal(_ value: UInt64) {
                var rest = value
                repeat {
                    put(UInt8(truncatingIfNeeded: rest % 10) + 0x30)
                    rest /= 10
                } while rest > 0
            }
            put(0x0A); put(0x0D)
            putDecimal(sequence)
            put(0x2D)  // -
            putDecimal(milliseconds)
            let length = raw.count - 2 - start
            put(0x0A); put(0x0D)
            putDecimal(UInt64(length))
            put(0x24)  // $
            output.append(contentsOf: UnsafeRawBufferPointer(rebasing: raw[start...]))
        }
    }

    static func decimalLength(_ value: UInt64) -> Int {
        var length = 1
        var rest = value / 10
        while rest > 0 { length += 1; rest /= 10 }
        return length
    }

    private func appendDecimal(_ value: Int) {
        appendDecimal(UInt64(value))
    }

    private func appendDecimal(_ value: UInt64) {
        // Two ids per acknowledged entry go through here.
        DecimalDigits.with(value) { output.append(contentsOf: $0) }
    }

    /// For the benchmarks' end-to-end piece: hands `body` the RESP bytes queued on a connection
    /// that never connected, then forgets them and their completions (none is called), as a
    /// write would, without a socket.
    @_spi(Benchmarks)
    public func takeOutputInMemory(_ body: (UnsafeRawBufferPointer) -> Void) {
        precondition(fd < 0 && !started, "takeOutputInMemory is for a connection that never connected")
        output.withUnsafeBytes(body)
        output.removeAll(keepingCapacity: true)
        completions.removeAll(keepingCapacity: true)
        completionHead = 0
    }

    /// Queues one command built by `build`, whose reply is read straight from the tape (see
    /// `RawCompletion`): no reply value is made for it.
    public func sendRaw(argumentCount: Int, _ build: (inout RedisCommandBuilder) -> Void, _ completion: @escaping RawCompletion) {
        appendCommand(argumentCount: argumentCount, build)
        endCommand(.raw(completion))
    }

    /// Queues one command whose reply is read straight from the tape (see `RawCompletion`).
    public func sendRaw(_ arguments: [String], _ completion: @escaping RawCompletion) {
        beginCommand(count: arguments.count)
        for argument in arguments { appendArgument(argument) }
        endCommand(.raw(completion))
    }

    private func endCommand(_ completion: Completion?) {
        endCommand(.reply(completion))
    }

    private func endCommand(_ pending: Pending) {
        completions.append(pending)
        if closed {
            // Answer at once: the caller learns the connection is gone.
            loop.schedule(afterMilliseconds: 0) { pending.fail(.connectionLost("not connected")) }
            completions.removeLast()
            output.removeAll(keepingCapacity: true)
            return
        }
        scheduleFlush()
    }

    private func scheduleFlush() {
        if flushScheduled || connecting || tlsHandshaking || fd < 0 { return }
        flushScheduled = true
        loop.callAtEndOfTick(self)
    }

    public func endOfTick() {
        flushScheduled = false
        flush()
    }

    private func flush() {
        guard fd >= 0, !connecting, !tlsHandshaking else { return }
        while outputOffset < output.count {
            if let tls {
                let result = output.withUnsafeBytes { bytes in tls.write(UnsafeRawBufferPointer(rebasing: bytes[outputOffset...])) }
                switch result {
                case .bytes(let count):
                    outputOffset += count
                    continue
                case .wantWrite, .wantRead:
                    loop.setInterest(fd, [.read, .write])
                    return
                case .closed:
                    fail(.connectionLost(tlsLossReason(tls)))
                    return
                }
            }
            // MSG_NOSIGNAL: a Redis that went away (restart, kill) is an error to handle here,
            // not a SIGPIPE that ends the whole process.
            let written = output.withUnsafeBytes { bytes in
                Glibc.send(fd, bytes.baseAddress! + outputOffset, bytes.count - outputOffset, Int32(MSG_NOSIGNAL))
            }
            if written > 0 {
                outputOffset += written
            } else if written < 0 && errno == EINTR {
                continue
            } else if written < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                loop.setInterest(fd, [.read, .write])
                return
            } else {
                fail(.connectionLost("write failed: \(String(cString: strerror(errno)))"))
                return
            }
        }
        output.removeAll(keepingCapacity: true)
        outputOffset = 0
        loop.setInterest(fd, .read)
    }

    // MARK: IOHandler

    public func writable() {
        if connecting {
            let error = Socket.pendingError(fd)
            if error != 0 {
                fail(.connectFailed("\(endpoint): \(String(cString: strerror(error)))"))
                return
            }
            // Connected; ready once the handshake is answered (`handshakeAnswered`).
            connecting = false
            if let tlsContext {
                do {
                    tls = try TLSStream(context: tlsContext, fd: fd, host: endpoint.host)
                } catch {
                    fail(.connectFailed("\(endpoint): \(error)"))
                    return
                }
                tlsHandshaking = true
                continueTLSHandshake()
                return
            }
            flush()
            return
        }
        if tlsHandshaking { continueTLSHandshake(); return }
        if tlsWantsWriteForRead {
            tlsWantsWriteForRead = false
            readable()
            if fd < 0 { return }
        }
        flush()
    }

    /// Drives the TLS handshake; once done, the queued AUTH/SELECT/PING and commands go out.
    private func continueTLSHandshake() {
        guard let tls, let settings = endpoint.tls else { return }
        do throws(TLSError) {
            switch try tls.handshake() {
            case .wantRead:
                loop.setInterest(fd, .read)
            case .wantWrite:
                loop.setInterest(fd, [.read, .write])
            case .done:
                tlsHandshaking = false
                loop.setInterest(fd, .read)
                flush()
                // The server's first bytes may already be decrypted and waiting.
                if fd >= 0 { readable() }
            }
        } catch {
            fail(.connectFailed("\(endpoint): \(RedisTLSAdvice.handshakeFailed(error, tls: settings))"))
        }
    }

    /// Why a TLS read or write ended the connection, with advice while it was not ready yet
    /// (TLS 1.3 servers refuse a client certificate only after the client's handshake ended).
    private func tlsLossReason(_ tls: TLSStream) -> String {
        let failure = tls.lastFailure ?? "the TLS session ended"
        if !isReady, let settings = endpoint.tls {
            if let advice = RedisTLSAdvice.failure(failure, tls: settings) { return advice }
            if !answered { return RedisTLSAdvice.closedAfterHandshake(failure, tls: settings) }
        }
        return "TLS: \(failure)"
    }

    /// The connection ended on a plain read: on a plain connection that never got an answer,
    /// say what a TLS port does with plain text.
    private func plainLossReason(_ cause: String) -> String {
        if endpoint.tls == nil && !answered && !isReady { return "\(RedisTLSAdvice.plainToTLS) (\(cause))" }
        return cause
    }

    public func readable() {
        if connecting { writable(); if connecting || fd < 0 { return } }
        if tlsHandshaking { continueTLSHandshake(); return }
        guard let reader else { return }
        if let tls {
            readTLS(tls, reader: reader)
            return
        }
        while fd >= 0 {
            let count = readBuffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count > 0 {
                if !drainReplies(reader, count: count) { return }
                if count < readBuffer.count { return }
            } else if count == 0 {
                fail(.connectionLost(plainLossReason("Redis closed the connection")))
                return
            } else if errno == EINTR {
                continue
            } else if errno == EAGAIN || errno == EWOULDBLOCK {
                return
            } else {
                fail(.connectionLost(plainLossReason(String(cString: strerror(errno)))))
                return
            }
        }
    }

    /// Reads until OpenSSL wants more from the socket: a record may hold several replies, and
    /// bytes OpenSSL already decrypted raise no further readiness event.
    private func readTLS(_ tls: TLSStream, reader: RESPReader) {
        while fd >= 0 {
            let result = readBuffer.withUnsafeMutableBytes { tls.read(into: $0) }
            switch result {
            case .bytes(let count):
                if !drainReplies(reader, count: count) { return }
            case .wantRead:
                return
            case .wantWrite:
                tlsWantsWriteForRead = true
                loop.setInterest(fd, [.read, .write])
                return
            case .closed:
                fail(.connectionLost(tlsLossReason(tls)))
                return
            }
        }
    }

    /// Reads the `count` bytes just received and hands every complete reply to its completion;
    /// false if the connection failed meanwhile.
    private func drainReplies(_ reader: RESPReader, count: Int) -> Bool {
        var offset = 0
        while true {
            let outcome: Result<Bool, RESPReader.ProtocolError> = readBuffer.withUnsafeBytes { bytes in
                do throws(RESPReader.ProtocolError) { return .success(try reader.read(UnsafeRawBufferPointer(rebasing: bytes[0..<count]), from: &offset)) } catch { return .failure(error) }
            }
            guard case .success(let complete) = outcome else {
                if case .failure(let error) = outcome { fail(.protocolError("unreadable reply: \(error)")) }
                return false
            }
            guard complete else { return true }
            answered = true
            defer { tape.reset() }
            guard completionHead < completions.count else {
                // Pub/sub messages (Sentinel's +switch-master) arrive unasked; elsewhere it is a fault.
                guard let onUnsolicitedReply else {
                    fail(.protocolError("a reply nobody asked for"))
                    return false
                }
                onUnsolicitedReply(tape.reply())
                if closed { return false }
                continue
            }
            let completion = completions[completionHead]
            completions[completionHead] = .reply(nil)
            completionHead += 1
            if completionHead == completions.count {
                completions.removeAll(keepingCapacity: true)
                completionHead = 0
            } else if completionHead > 4096 {
                completions.removeFirst(completionHead)
                completionHead = 0
            }
            switch completion {
            case .reply(let completion): completion?(.success(tape.reply()))
            case .raw(let completion): completion(.success(tape))
            }
            if closed { return false }
        }
    }

    private func fail(_ error: RedisError) {
        guard !closed else { return }
        closed = true
        isReady = false
        connecting = false
        if let connectTimer { loop.cancel(connectTimer) }
        connectTimer = nil
        tlsHandshaking = false
        if fd >= 0 {
            loop.deregister(fd)
            if let tls, case .connectionLost("closed by Herald") = error { tls.shutdown() }
            Glibc.close(fd)
            fd = -1
        }
        tls = nil
        let pending = completions[completionHead...]
        completions.removeAll()
        completionHead = 0
        output.removeAll()
        outputOffset = 0
        let lost: RedisError
        if case .connectionLost = error { lost = error } else { lost = .connectionLost(error.description) }
        for completion in pending { completion.fail(lost) }
        delegate?.redisConnectionClosed(self, error: error)
    }
}

/// One argument of a Redis command.
public enum RedisArgument: ExpressibleByStringLiteral, Sendable {
    case text(String)
    case bytes([UInt8])
    case integer(Int64)

    public init(stringLiteral value: String) { self = .text(value) }
}

/// Appends the arguments of one command to a connection's output buffer.
public struct RedisCommandBuilder {
    let connection: RedisConnection
    var written = 0

    public mutating func add(_ string: String) { connection.appendArgument(string); written += 1 }
    public mutating func add(_ bytes: [UInt8]) { connection.appendArgument(bytes); written += 1 }
    public mutating func add(_ bytes: UnsafeRawBufferPointer) { connection.appendArgument(bytes); written += 1 }
    public mutating func add(integer: Int64) { connection.appendArgument(integer: integer); written += 1 }
    /// A stream entry id, `<milliseconds>-<sequence>`.
    public mutating func add(entryMilliseconds milliseconds: UInt64, sequence: UInt64) {
        connection.appendArgument(entryMilliseconds: milliseconds, sequence: sequence)
        written += 1
    }
}
