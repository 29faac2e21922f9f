import Glibc

/// An `EventLoop` running on a thread of its own: how commands and tests host a loop.
public final class EventLoopThread: @unchecked Sendable {
    public let loop: EventLoop
    private var thread: pthread_t?

    /// Starts the thread and its loop.
    public init() throws(SystemError) {
        loop = try EventLoop()
        let box = Unmanaged.passRetained(loop)
        var handle = pthread_t()
        let rc = pthread_create(&handle, nil, { raw in
            let loop = Unmanaged<EventLoop>.fromOpaque(raw!).takeRetainedValue()
            loop.run()
            return nil
        }, box.toOpaque())
        if rc != 0 {
            box.release()
            throw SystemError(operation: "pthread_create", errno: rc)
        }
        thread = handle
    }

    /// Runs `body` on the loop and returns its result to the caller's task.
    public func submit<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            loop.execute {
                do { continuation.resume(returning: try body()) } catch { continuation.resume(throwing: error) }
            }
        }
    }

    /// Runs `body` on the loop and blocks the calling (non-loop) thread until it returns.
    public func submitAndWait<T>(_ body: @escaping @Sendable () -> T) -> T {
        precondition(!loop.isCurrentThreadRunningLoop, "submitAndWait from the loop's own thread would deadlock")
        let box = ResultBox<T>()
        var semaphore = sem_t()
        sem_init(&semaphore, 0, 0)
        defer { sem_destroy(&semaphore) }
        withUnsafeMutablePointer(to: &semaphore) { pointer in
            let semaphoreAddress = UInt(bitPattern: pointer)
            loop.execute { [box] in
                box.value = body()
                sem_post(UnsafeMutablePointer<sem_t>(bitPattern: semaphoreAddress)!)
            }
            while sem_wait(pointer) != 0 && errno == EINTR {}
        }
        return box.value!
    }

    /// Stops the loop and waits for its thread to end.
    public func shutdown() {
        loop.stop()
        if let thread {
            pthread_join(thread, nil)
            self.thread = nil
        }
    }

    deinit {
        shutdown()
    }
}

private final class ResultBox<T>: @unchecked Sendable {
    var value: T?
}
