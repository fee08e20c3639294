import Foundation

/// Latency samples in nanoseconds, summarised as percentiles.
struct Latencies {
    private(set) var samples: [UInt64] = []

    mutating func add(_ nanos: UInt64) { samples.append(nanos) }
    mutating func add(contentsOf other: [UInt64]) { samples.append(contentsOf: other) }

    /// The mean, in milliseconds.
    var mean: Double {
        samples.isEmpty ? .nan : Double(samples.reduce(0, +)) / Double(samples.count) / 1e6
    }

    func percentile(_ p: Double) -> Double {
        guard !samples.isEmpty else { return .nan }
        let sorted = samples.sorted()
        let index = min(sorted.count - 1, Int((p / 100) * Double(sorted.count)))
        return Double(sorted[index]) / 1e6
    }
}

/// One printed result row: a measurement of the Swift layer beside the raw one.
struct Row {
    var name: String
    var swiftRate: Double
    var rawRate: Double
    var swiftP50: Double? = nil
    var rawP50: Double? = nil
    var swiftP99: Double? = nil
    var rawP99: Double? = nil
}

func monotonicNow() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// Peak resident set size of this process, MiB.
func peakRSSMiB() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_maxrss) / 1024
}

/// Current resident set size of a process, MiB (from /proc).
func currentRSSMiB(pid: Int32 = getpid()) -> Double? {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
    for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        let kb = line.split(separator: " ").compactMap { Double($0) }.first ?? 0
        return kb / 1024
    }
    return nil
}

func printTable(_ rows: [Row]) {
    func f(_ v: Double?, _ digits: Int = 3) -> String {
        guard let v, v.isFinite else { return "-" }
        return String(format: "%.\(digits)f", v)
    }
    func pad(_ s: String, _ width: Int, left: Bool = false) -> String {
        let padding = String(repeating: " ", count: max(0, width - s.count))
        return left ? s + padding : padding + s
    }
    let header = [pad("measurement", 46, left: true), pad("swift/s", 10), pad("raw C/s", 10), pad("ratio", 7),
                  pad("swift p50", 10), pad("raw p50", 10), pad("swift p99", 10), pad("raw p99", 10)]
    print("")
    print(header.joined(separator: " "))
    for r in rows {
        let cells = [pad(r.name, 46, left: true), pad(f(r.swiftRate, 0), 10), pad(f(r.rawRate, 0), 10),
                     pad(String(format: "%.1f%%", 100 * r.swiftRate / r.rawRate), 7),
                     pad(f(r.swiftP50), 10), pad(f(r.rawP50), 10), pad(f(r.swiftP99), 10), pad(f(r.rawP99), 10)]
        print(cells.joined(separator: " "))
    }
    print("(latencies in ms; ratio = Swift layer throughput / raw rabbitmq-c throughput)")
}

/// User and system CPU seconds a process has used (`/proc/<pid>/stat`,
/// fields 14 and 15).
struct CPUTime {
    var user: Double
    var system: Double

    static let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))

    static func of(pid: Int32) -> CPUTime? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return nil }
        // After "pid (comm) ": state is field 3, utime 14, stime 15.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return CPUTime(user: user / ticksPerSecond, system: system / ticksPerSecond)
    }

    /// User + system µs per operation between two readings; nil if either is missing.
    static func micros(from before: CPUTime?, to after: CPUTime?, per count: Int) -> Double? {
        guard let before, let after, count > 0 else { return nil }
        return (after.user + after.system - before.user - before.system) / Double(count) * 1e6
    }
}

/// User plus system CPU time of a process so far, in nanoseconds (0 when
/// it cannot be read): ``CPUTime`` summed, for the benchmarks that
/// subtract two readings.
func cpuNanos(pid: Int32) -> UInt64 {
    guard let t = CPUTime.of(pid: pid) else { return 0 }
    return UInt64(((t.user + t.system) * 1e9).rounded())
}
