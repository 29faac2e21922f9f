import CHeraldShims
import Glibc
import Synchronization

/// What a file descriptor registered with an `EventLoop` wants to hear about.
public struct IOInterest: OptionSet, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    public static let read = IOInterest(rawValue: EPOLLIN.rawValue)
    public static let write = IOInterest(rawValue: EPOLLOUT.rawValue)
}

/// Something that owns a file descriptor on an `EventLoop` and reacts to its readiness.
public protocol IOHandler: AnyObject {
    /// The descriptor became readable (or reported an error or hang-up, which a read will surface).
    func readable()
    /// The descriptor became writable.
    func writable()
}

/// Something that wants one call at the end of the current loop iteration, after every ready
/// descriptor was served: HTTP/2 sessions use it to turn many submitted requests into one write.
public protocol TickObserver: AnyObject {
    func endOfTick()
}

/// A single-threaded reactor: epoll for readiness, a timer heap, and an eventfd for wake-ups.
///
/// It owns every socket of one worker thread. Everything but `execute(_:)` and `stop()` must be
/// called on the loop's own thread; those two are the only cross-thread entry points, and the
/// only place a lock is taken.
public final class EventLoop: @unchecked Sendable {
    private let epollFD: Int32
    private let wakeFD: Int32
    private var handlers: [(any IOHandler)?] = []
    private var interests: [UInt32] = []

    private var timers = TimerHeap()
    private var nextTimerID: UInt64 = 1
    /// Ids of cancelled timers (some may have run already). Bounded: once they outnumber half the
    /// heap, the heap drops the cancelled entries and the set is forgotten (`cancel`).
    private var cancelledTimers = Set<UInt64>()

    private var endOfTickObservers: [any TickObserver] = []
    private let inbox = Mutex<[@Sendable () -> Void]>([])
    private let stopRequested = Atomic<Bool>(false)
    private var threadID: pthread_t?

    /// Monotonic milliseconds, read once per iteration (and refreshed by `refreshNow()`).
    public private(set) var now: Int64

    public init() throws(SystemError) {
        // A peer that resets a socket must surface as an error on that socket, never as a SIGPIPE
        // that ends the process (OpenSSL writes with write(2) on the descriptor it was given).
        _ = EventLoop.ignoreSIGPIPE
        epollFD = epoll_create1(Int32(EPOLL_CLOEXEC))
        if epollFD < 0 { throw SystemError(operation: "epoll_create1", errno: errno) }
        wakeFD = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        if wakeFD < 0 {
            let code = errno
            close(epollFD)
            throw SystemError(operation: "eventfd", errno: code)
        }
        now = EventLoop.monotonicMilliseconds()
        var event = epoll_event()
        event.events = EPOLLIN.rawValue
        event.data.fd = wakeFD
        _ = epoll_ctl(epollFD, EPOLL_CTL_ADD, wakeFD, &event)
    }

    deinit {
        close(wakeFD)
        close(epollFD)
    }

    private static let ignoreSIGPIPE: Void = {
        _ = signal(SIGPIPE, SIG_IGN)
    }()

    public static func monotonicMilliseconds() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }

    public func refreshNow() { now = EventLoop.monotonicMilliseconds() }

    /// True when called on the thread running this loop (or before it started running).
    public var inLoop: Bool {
        guard let threadID else { return true }
        return pthread_equal(threadID, pthread_self()) != 0
    }

    /// True only when called on the thread currently running this loop.
    public var isCurrentThreadRunningLoop: Bool {
        guard let threadID else { return false }
        return pthread_equal(threadID, pthread_self()) != 0
    }

    // MARK: descriptors

    public func register(_ fd: Int32, handler: any IOHandler, interest: IOInterest) throws(SystemError) {
        precondition(inLoop, "EventLoop.register called off the loop thread")
        let index = Int(fd)
        if index >= handlers.count {
            handlers.append(contentsOf: repeatElement(nil, count: index + 1 - handlers.count))
            interests.append(contentsOf: repeatElement(0, count: index + 1 - interests.count))
        }
        var event = epoll_event()
        event.events = interest.rawValue | EPOLLRDHUP.rawValue
        event.data.fd = fd
        if epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event) != 0 {
            throw SystemError(operation: "epoll_ctl(ADD)", errno: errno)
        }
        handlers[index] = handler
        interests[index] = interest.rawValue
    }

    /// Changes what `fd` is watched for; a no-op when nothing changes (so callers may call it freely).
    public func setInterest(_ fd: Int32, _ interest: IOInterest) {
        let index = Int(fd)
        guard index < interests.count, handlers[index] != nil, interests[index] != interest.rawValue else { return }
        var event = epoll_event()
        event.events = interest.rawValue | EPOLLRDHUP.rawValue
        event.data.fd = fd
        _ = epoll_ctl(epollFD, EPOLL_CTL_MOD, fd, &event)
        interests[index] = interest.rawValue
    }

    /// Stops watching `fd`. The caller still owns and closes the descriptor.
    public func deregister(_ fd: Int32) {
        let index = Int(fd)
        guard index < handlers.count, handlers[index] != nil else { return }
        _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, fd, nil)
        handlers[index] = nil
        interests[index] = 0
    }

    // MARK: timers

    /// An opaque handle to cancel a scheduled timer.
    public struct TimerID: Hashable, Sendable {
        fileprivate let raw: UInt64
    }

    /// Runs `body` on the loop after `milliseconds` (monotonic). Loop thread only.
    @discardableResult
    public func schedule(afterMilliseconds milliseconds: Int64, _ body: @escaping () -> Void) -> TimerID {
        let id = nextTimerID
        nextTimerID += 1
        let deadline = now.addingReportingOverflow(max(0, milliseconds))
        let entry = TimerEntry(deadline: deadline.overflow ? .max : deadline.partialValue, id: id, body: body)
        timers.push(entry)
        return TimerID(raw: id)
    }

    /// Stops a timer that has not run yet; a no-op for one that ran or was cancelled before.
    public func cancel(_ timer: TimerID) {
        cancelledTimers.insert(timer.raw)
        // Ids of timers that already ran would otherwise stay here for the life of the loop
        // (the metrics server cancels one per connection): compact, amortized O(1) per cancel.
        if cancelledTimers.count > 64 && cancelledTimers.count * 2 > timers.count {
            timers.removeAll { cancelledTimers.contains($0.id) }
            cancelledTimers.removeAll(keepingCapacity: true)
        }
    }

    /// Timers in the heap (cancelled ones included) and cancelled ones remembered: for tests that
    /// check the bookkeeping stays bounded.
    var timerBookkeeping: (heap: Int, cancelled: Int) { (timers.count, cancelledTimers.count) }

    // MARK: end-of-tick

    /// Asks for one `endOfTick()` call after the current iteration; callers keep their own flag so
    /// that they are added once per tick.
    public func callAtEndOfTick(_ observer: any TickObserver) {
        endOfTickObservers.append(observer)
    }

    // MARK: cross-thread

    /// Runs `task` on the loop thread soon. Safe from any thread.
    public func execute(_ task: @escaping @Sendable () -> Void) {
        inbox.withLock { $0.append(task) }
        wake()
    }

    /// Makes `run()` return after the current iteration. Safe from any thread.
    public func stop() {
        stopRequested.store(true, ordering: .releasing)
        wake()
    }

    private func wake() {
        var one: UInt64 = 1
        _ = withUnsafeBytes(of: &one) { write(wakeFD, $0.baseAddress, 8) }
    }

    // MARK: running

    /// Serves descriptors, timers and tasks until `stop()`. Call from the thread that owns the loop.
    public func run() {
        threadID = pthread_self()
        // A stop() that came before run() (a command that failed while setting up) still counts.
        defer { stopRequested.store(false, ordering: .relaxed) }
        let capacity = 256
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: capacity)
        defer { events.deallocate() }
        while !stopRequested.load(ordering: .acquiring) {
            refreshNow()
            let timeout = nextTimeout()
            let count = epoll_wait(epollFD, events, Int32(capacity), timeout)
            refreshNow()
            if count > 0 {
                for i in 0..<Int(count) {
                    let event = events[i]
                    let fd = event.data.fd
                    if fd == wakeFD {
                        var value: UInt64 = 0
                        _ = withUnsafeMutableBytes(of: &value) { read(wakeFD, $0.baseAddress, 8) }
                        continue
                    }
                    let index = Int(fd)
                    let flags = event.events
                    let readMask = EPOLLIN.rawValue | EPOLLERR.rawValue | EPOLLHUP.rawValue | EPOLLRDHUP.rawValue
                    if flags & EPOLLOUT.rawValue != 0, index < handlers.count, let handler = handlers[index] {
                        handler.writable()
                    }
                    // The write handler may have closed and deregistered the descriptor.
                    if flags & readMask != 0, index < handlers.count, let handler = handlers[index] {
                        handler.readable()
                    }
                }
            } else if count < 0 && errno != EINTR {
                preconditionFailure("epoll_wait failed: errno \(errno)")
            }
            runInbox()
            runDueTimers()
            runEndOfTick()
        }
        runInbox()
    }

    private func nextTimeout() -> Int32 {
        if !endOfTickObservers.isEmpty { return 0 }
        if inbox.withLock({ !$0.isEmpty }) { return 0 }
        guard let deadline = timers.peekDeadline() else { return -1 }
        return Int32(clamping: max(0, deadline - now))
    }

    private func runInbox() {
        let tasks = inbox.withLock { tasks -> [@Sendable () -> Void] in
            if tasks.isEmpty { return [] }
            let taken = tasks
            tasks.removeAll(keepingCapacity: true)
            return taken
        }
        for task in tasks { task() }
    }

    private func runDueTimers() {
        while let deadline = timers.peekDeadline(), deadline <= now, let entry = timers.pop() {
            if cancelledTimers.remove(entry.id) != nil { continue }
            entry.body()
        }
        if timers.isEmpty { cancelledTimers.removeAll() }
    }

    private func runEndOfTick() {
        // Observers may add themselves again while being served; those run next tick.
        var index = 0
        while index < endOfTickObservers.count {
            let observer = endOfTickObservers[index]
            index += 1
            observer.endOfTick()
            if index > 4096 { break }
        }
        endOfTickObservers.removeFirst(index)
    }
}

struct TimerEntry {
    let deadline: Int64
    let id: UInt64
    let body: () -> Void
}

/// A binary min-heap of timers ordered by deadline, then by scheduling order.
struct TimerHeap {
    private var items: [TimerEntry] = []

    var isEmpty: Bool { items.isEmpty }
    var count: Int { items.count }

    /// Drops every entry `shouldRemove` picks and restores the heap order (O(n)).
    mutating func removeAll(where shouldRemove: (TimerEntry) -> Bool) {
        items.removeAll(where: shouldRemove)
        var index = items.count / 2
        while index > 0 {
            index -= 1
            siftDown(from: index)
        }
    }

    func peekDeadline() -> Int64? { items.first?.deadline }

    private static func before(_ a: TimerEntry, _ b: TimerEntry) -> Bool {
        a.deadline < b.deadline || (a.deadline == b.deadline && a.id < b.id)
    }

    mutating func push(_ entry: TimerEntry) {
        items.append(entry)
        var child = items.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            if !TimerHeap.before(items[child], items[parent]) { break }
            items.swapAt(child, parent)
            child = parent
        }
    }

    mutating func pop() -> TimerEntry? {
        guard !items.isEmpty else { return nil }
        items.swapAt(0, items.count - 1)
        let top = items.removeLast()
        siftDown(from: 0)
        return top
    }

    private mutating func siftDown(from start: Int) {
        var parent = start
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < items.count && TimerHeap.before(items[left], items[smallest]) { smallest = left }
            if right < items.count && TimerHeap.before(items[right], items[smallest]) { smallest = right }
            if smallest == parent { break }
            items.swapAt(parent, smallest)
            parent = smallest
        }
    }
}
