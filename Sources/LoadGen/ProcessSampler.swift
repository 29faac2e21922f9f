import Glibc
import Transport

/// CPU time, time spent waiting for a CPU, and memory of processes, read from /proc.
///
/// `sample()` is called about every 200 ms by `LoadRun` and once more at the end, before the
/// workers are stopped: it keeps each process's peak VmHWM (the kernel's own high-water mark) and
/// the largest VmRSS it saw, the last utime + stime, and the time its threads were runnable but
/// not running (the run-queue delay of /proc/PID/task/TID/schedstat; a thread that has exited
/// keeps its last reading). Linux only.
public final class ProcessSampler {
    public struct Reading: Sendable, Equatable {
        public var cpuSeconds = 0.0
        /// Runnable but waiting for a CPU, summed over the process's threads; nil while the kernel
        /// gave no schedstat (a kernel built without `CONFIG_SCHED_INFO`).
        public var cpuWaitSeconds: Double? = nil
        public var peakHWMBytes = 0
        public var maxRSSBytes = 0
    }

    public private(set) var readings: [pid_t: Reading] = [:]
    private let ticksPerSecond: Double
    /// The last run-queue delay (ns) read for each thread of each process.
    private var threadWaits: [pid_t: [pid_t: UInt64]] = [:]

    public init(pids: [pid_t]) {
        let ticks = sysconf(Int32(_SC_CLK_TCK))
        ticksPerSecond = Double(ticks > 0 ? ticks : 100)
        for pid in pids { readings[pid] = Reading() }
    }

    /// Reads every process once; a process that has gone keeps its last reading.
    public func sample() {
        for pid in readings.keys {
            var reading = readings[pid]!
            if let cpu = ProcessSampler.cpuTicks(pid: pid) { reading.cpuSeconds = Double(cpu) / ticksPerSecond }
            if let waits = ProcessSampler.runQueueWaits(pid: pid) {
                threadWaits[pid, default: [:]].merge(waits) { _, new in new }
                reading.cpuWaitSeconds = Double(threadWaits[pid]!.values.reduce(0, +)) / 1e9
            }
            if let memory = ProcessSampler.memory(pid: pid) {
                reading.peakHWMBytes = max(reading.peakHWMBytes, memory.hwm)
                reading.maxRSSBytes = max(reading.maxRSSBytes, memory.rss)
            }
            readings[pid] = reading
        }
    }

    /// utime + stime of all workers, seconds.
    public var totalCPUSeconds: Double { readings.values.reduce(0) { $0 + $1.cpuSeconds } }
    /// Runnable-but-waiting time of all the processes, seconds; nil when none had schedstat.
    public var totalCPUWaitSeconds: Double? {
        let waits = readings.values.compactMap(\.cpuWaitSeconds)
        return waits.isEmpty ? nil : waits.reduce(0, +)
    }
    /// The largest VmHWM of one worker.
    public var peakHWMBytes: Int { readings.values.map(\.peakHWMBytes).max() ?? 0 }
    /// The largest VmRSS sample of one worker.
    public var maxRSSBytes: Int { readings.values.map(\.maxRSSBytes).max() ?? 0 }

    /// utime + stime in clock ticks, from /proc/PID/stat (fields 14 and 15, counted after the
    /// command name, which may hold spaces and parentheses).
    static func cpuTicks(pid: pid_t) -> Int? {
        readProcFile("/proc/\(pid)/stat").flatMap(cpuTicks(statText:))
    }

    static func cpuTicks(statText text: String) -> Int? {
        guard let close = text.lastIndex(of: ")") else { return nil }
        // After the name: field 3 (state) is [0], so utime (14) is [11] and stime (15) is [12].
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 12, let user = Int(fields[11]), let system = Int(fields[12]) else { return nil }
        return user + system
    }

    /// Nanoseconds each thread of `pid` has spent runnable but not running, by thread id; nil
    /// when the process is gone or the kernel keeps no schedstat.
    static func runQueueWaits(pid: pid_t) -> [pid_t: UInt64]? {
        guard let directory = opendir("/proc/\(pid)/task") else { return nil }
        defer { closedir(directory) }
        var waits: [pid_t: UInt64] = [:]
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard let tid = pid_t(name), let text = readProcFile("/proc/\(pid)/task/\(tid)/schedstat"),
                  let wait = runQueueWait(schedstatText: text) else { continue }
            waits[tid] = wait
        }
        return waits.isEmpty ? nil : waits
    }

    /// The second field of a schedstat line (`<on CPU ns> <waiting ns> <timeslices>`).
    static func runQueueWait(schedstatText text: String) -> UInt64? {
        let fields = text.split(whereSeparator: { $0 == " " || $0 == "\n" })
        guard fields.count >= 3 else { return nil }
        return UInt64(fields[1])
    }

    /// VmHWM and VmRSS in bytes, from /proc/PID/status.
    static func memory(pid: pid_t) -> (hwm: Int, rss: Int)? {
        guard let text = readProcFile("/proc/\(pid)/status") else { return nil }
        var hwm = 0, rss = 0
        for line in text.split(separator: "\n") {
            if line.hasPrefix("VmHWM:") { hwm = kilobytes(line) }
            if line.hasPrefix("VmRSS:") { rss = kilobytes(line) }
        }
        return (hwm, rss)
    }

    private static func kilobytes(_ line: Substring) -> Int {
        let parts = line.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count >= 2, let value = Int(parts[1]) else { return 0 }
        return value * 1024
    }
}

/// A small /proc (or other text) file, whole; nil when it cannot be read.
func readProcFile(_ path: String) -> String? {
    try? PEMFile.read(path: path)
}
