import Glibc
import Synchronization

/// The standard process collector's metrics, under the names every Prometheus client library
/// exports them (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
/// `process_virtual_memory_bytes`, `process_open_fds`, `process_max_fds`,
/// `process_start_time_seconds`), so the dashboards and alerts written for them work on Herald.
///
/// Read from /proc/self when /metrics is scraped, not on a timer: a scrape costs a small read and
/// a directory listing, and a worker nobody scrapes pays nothing. /proc/self/stat and
/// /proc/self/fd stay open from the start and are read again in place, so the metrics still
/// come when the process has run out of file descriptors, which is when `process_open_fds`
/// matters most. Linux only, like Herald; a value /proc does not give is left out rather than
/// reported as 0.
public final class ProcessMetrics: Sendable {
    /// When the process started (UNIX seconds); fixed for its life, so read once.
    let startTimeSeconds: Double?
    let ticksPerSecond: Double
    let pageSize: Double
    private let handles: Mutex<Handles>

    /// The descriptors kept open (-1 and nil when opening failed: then each scrape opens them).
    struct Handles {
        var stat: Int32
        var descriptors: OpaquePointer?
    }

    public init() {
        ticksPerSecond = Double(max(1, sysconf(Int32(_SC_CLK_TCK))))
        pageSize = Double(max(1, sysconf(Int32(_SC_PAGESIZE))))
        let stat = open("/proc/self/stat", O_RDONLY | O_CLOEXEC)
        let descriptors = opendir("/proc/self/fd")
        if let descriptors { _ = fcntl(dirfd(descriptors), F_SETFD, FD_CLOEXEC) }
        handles = Mutex(Handles(stat: stat, descriptors: descriptors))
        if let parsed = ProcessMetrics.read("/proc/self/stat").flatMap(ProcessStat.init),
           let bootTime = ProcessMetrics.read("/proc/stat").flatMap(ProcessMetrics.bootTime) {
            startTimeSeconds = bootTime + Double(parsed.startTimeTicks) / ticksPerSecond
        } else {
            startTimeSeconds = nil
        }
    }

    deinit {
        handles.withLock { handles in
            if handles.stat >= 0 { close(handles.stat) }
            if let descriptors = handles.descriptors { closedir(descriptors) }
        }
    }

    /// One reading of every value (nil where /proc did not answer).
    public struct Reading: Sendable, Equatable {
        public var cpuSeconds: Double?
        public var residentBytes: Double?
        public var virtualBytes: Double?
        public var openFDs: Int?
        public var maxFDs: Double?
        public var startTimeSeconds: Double?
    }

    public func read() -> Reading {
        var reading = Reading()
        let (statText, openFDs) = handles.withLock { handles in
            let text = handles.stat >= 0 ? ProcessMetrics.read(fd: handles.stat) : ProcessMetrics.read("/proc/self/stat")
            let count: Int?
            if let descriptors = handles.descriptors {
                rewinddir(descriptors)
                count = ProcessMetrics.count(descriptors)
            } else {
                count = ProcessMetrics.openDescriptors()
            }
            return (text, count)
        }
        if let stat = statText.flatMap(ProcessStat.init) {
            reading.cpuSeconds = Double(stat.userTicks + stat.systemTicks) / ticksPerSecond
            reading.residentBytes = Double(stat.residentPages) * pageSize
            reading.virtualBytes = Double(stat.virtualBytes)
        }
        reading.openFDs = openFDs
        var limit = rlimit()
        if getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 {
            reading.maxFDs = limit.rlim_cur == rlim_t.max ? Double.infinity : Double(limit.rlim_cur)
        }
        reading.startTimeSeconds = startTimeSeconds
        return reading
    }

    /// Appends the metrics in the Prometheus text format, with the help texts other clients use.
    public func emit(into buffer: inout [UInt8]) {
        let reading = read()
        var text = ""
        func add(_ name: String, _ type: String, _ help: String, _ value: Double?) {
            guard let value else { return }
            text += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n\(name) \(ProcessMetrics.number(value))\n"
        }
        add("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.", reading.cpuSeconds)
        add("process_open_fds", "gauge", "Number of open file descriptors.", reading.openFDs.map(Double.init))
        add("process_max_fds", "gauge", "Maximum number of open file descriptors.", reading.maxFDs)
        add("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", reading.virtualBytes)
        add("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", reading.residentBytes)
        add("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.", reading.startTimeSeconds)
        buffer.append(contentsOf: text.utf8)
    }

    static func number(_ value: Double) -> String {
        if value == .infinity { return "+Inf" }
        if value == value.rounded() && abs(value) < 1e15 { return String(Int64(value)) }
        return String(value)
    }

    /// `btime` of /proc/stat: when the machine booted (UNIX seconds).
    static func bootTime(_ text: String) -> Double? {
        for line in text.split(separator: "\n") where line.hasPrefix("btime ") {
            return Double(line.dropFirst(6).trimmingCharacters(in: " "))
        }
        return nil
    }

    /// Entries of /proc/self/fd, opened for this one count.
    static func openDescriptors() -> Int? {
        guard let directory = opendir("/proc/self/fd") else { return nil }
        defer { closedir(directory) }
        return count(directory)
    }

    /// Entries of an open /proc/self/fd listing, not counting the descriptor that lists them.
    static func count(_ directory: OpaquePointer) -> Int {
        let own = dirfd(directory)
        var count = 0
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            guard name != ".", name != "..", Int32(name) != own else { continue }
            count += 1
        }
        return count
    }

    /// The whole of a small /proc file (they report a size of 0, so read to the end).
    static func read(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        return read(fd: fd)
    }

    /// The whole of an open /proc file, from its start (pread: the kernel renders it afresh).
    static func read(fd: Int32) -> String? {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while bytes.count < 1 << 20 {
            let offset = bytes.count
            let count = chunk.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, off_t(offset)) }
            if count > 0 {
                bytes.append(contentsOf: chunk[0..<count])
            } else if count < 0 && errno == EINTR {
                continue
            } else {
                break
            }
        }
        return bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self)
    }
}

/// The fields of /proc/[pid]/stat the process metrics need (proc(5)).
struct ProcessStat: Equatable {
    var userTicks: UInt64
    var systemTicks: UInt64
    var startTimeTicks: UInt64
    var virtualBytes: UInt64
    var residentPages: UInt64

    /// Parses the line; the command name (field 2) is in parentheses and may hold spaces and
    /// parentheses itself, so the fields are counted from the last `)`.
    init?(_ text: String) {
        guard let close = text.lastIndex(of: ")") else { return nil }
        // Field 3 (state) is the first after the name.
        let fields = text[text.index(after: close)...].split(separator: " ", omittingEmptySubsequences: true)
        func field(_ number: Int) -> UInt64? {
            let index = number - 3
            guard index >= 0, index < fields.count else { return nil }
            return UInt64(fields[index].trimmingCharacters(in: "\n"))
        }
        guard let user = field(14), let system = field(15), let start = field(22), let virtual = field(23), let resident = field(24)
        else { return nil }
        userTicks = user
        systemTicks = system
        startTimeTicks = start
        virtualBytes = virtual
        residentPages = resident
    }
}

private extension Substring {
    func trimmingCharacters(in characters: String) -> Substring {
        var result = self
        while let first = result.first, characters.contains(first) { result = result.dropFirst() }
        while let last = result.last, characters.contains(last) { result = result.dropLast() }
        return result
    }
}
