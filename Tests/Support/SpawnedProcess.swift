#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// A child process the tests start, with the part of `Foundation.Process`'s interface they use,
/// started by `posix_spawn`. Foundation's `Process.run()` reads `/proc/self/fd` to find the
/// descriptors to close in the child and copies each entry's whole 256-byte name, reading past
/// glibc's directory buffer: now and then (more often the more descriptors the test process
/// holds, as under the PostgreSQL suites) that read hit an unmapped page and the test process
/// died of SIGSEGV (swift-corelibs-foundation pull request 5472). Here the child closes every
/// descriptor above its standard streams with `posix_spawn_file_actions_addclosefrom_np`.
public final class SpawnedProcess: @unchecked Sendable {
    public var executableURL: URL?
    public var arguments: [String]?
    /// nil: the test process's environment.
    public var environment: [String: String]?
    /// Each a `Pipe` (the child gets its end, this process closes it), a `FileHandle`
    /// (`FileHandle.nullDevice`: /dev/null), or nil (the test process's own).
    public var standardInput: Any?
    public var standardOutput: Any?
    public var standardError: Any?

    private let lock = NSLock()
    private var pid: pid_t = 0
    /// The wait status once the child has been reaped.
    private var status: Int32?

    public init() {}

    public var processIdentifier: Int32 { lock.withLock { pid } }

    /// Starts the child; throws when it could not be.
    public func run() throws {
        guard let executable = executableURL?.path else { throw ChildProcessError(description: "no executable to run") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var parentEnds: [FileHandle] = []
        for (descriptor, stream) in [(Int32(0), standardInput), (1, standardOutput), (2, standardError)] {
            switch stream {
            case let pipe as Pipe:
                let child = descriptor == 0 ? pipe.fileHandleForReading : pipe.fileHandleForWriting
                posix_spawn_file_actions_adddup2(&actions, child.fileDescriptor, descriptor)
                parentEnds.append(child)
            case let handle as FileHandle where handle.fileDescriptor >= 0:
                posix_spawn_file_actions_adddup2(&actions, handle.fileDescriptor, descriptor)
            case is FileHandle:
                posix_spawn_file_actions_addopen(&actions, descriptor, "/dev/null", descriptor == 0 ? O_RDONLY : O_WRONLY, 0)
            default:
                break
            }
        }
        try Self.closeInheritedDescriptors(&actions)
        let argv = ([executable] + (arguments ?? [])).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        let variables = (environment ?? ProcessInfo.processInfo.environment).map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for pointer in variables { free(pointer) } }
        var child: pid_t = 0
        let spawned = posix_spawn(&child, executable, &actions, nil, argv, variables)
        guard spawned == 0 else { throw ChildProcessError(description: "\(executable) could not start: \(String(cString: strerror(spawned)))") }
        lock.withLock { pid = child }
        // The child holds its ends now: this process's copies would keep a reader from ever
        // seeing the end of the child's output.
        for end in parentEnds { try? end.close() }
    }

    /// Reaps the child if it has ended (`block`: waits until it has). Its status, if reaped.
    @discardableResult
    private func reap(block: Bool) -> Int32? {
        lock.lock()
        defer { lock.unlock() }
        if let status { return status }
        guard pid > 0 else { return nil }
        var raw: Int32 = 0
        while true {
            let result = waitpid(pid, &raw, block ? 0 : WNOHANG)
            if result == pid {
                status = raw
                return raw
            }
            if result == -1 && errno == EINTR { continue }
            return nil
        }
    }

    public var isRunning: Bool {
        guard processIdentifier > 0 else { return false }
        return reap(block: false) == nil
    }

    public func waitUntilExit() {
        // Not under the lock while blocked: `isRunning` from another thread must still answer.
        var raw: Int32 = 0
        let child = processIdentifier
        guard child > 0, lock.withLock({ status }) == nil else { return }
        while waitpid(child, &raw, 0) == -1 {
            // ECHILD: reaped meanwhile by `isRunning` on another thread, which kept its status.
            guard errno == EINTR else { return }
        }
        lock.withLock { if status == nil { status = raw } }
    }

    /// The exit code, or the signal that ended the child (as `Process` says it).
    public var terminationStatus: Int32 {
        let raw = lock.withLock { status } ?? 0
        return raw & 0x7F == 0 ? (raw >> 8) & 0xFF : raw & 0x7F
    }

    public var terminationReason: Process.TerminationReason {
        let raw = lock.withLock { status } ?? 0
        return raw & 0x7F == 0 ? .exit : .uncaughtSignal
    }

    /// Sends SIGTERM.
    public func terminate() {
        let child = processIdentifier
        if child > 0 { kill(child, SIGTERM) }
    }

    /// Makes a spawn close every descriptor above the standard streams in the child: a child that
    /// inherits another thread's pipe keeps its write end open, and whoever reads that pipe to its
    /// end waits as long as the child lives (a test PostgreSQL cluster held a command line test's
    /// output pipe, and the test waited for ever).
    public static func closeInheritedDescriptors(_ actions: inout posix_spawn_file_actions_t) throws {
        guard let closeFrom else { throw ChildProcessError(description: "posix_spawn_file_actions_addclosefrom_np is missing (glibc 2.34 or later)") }
        guard closeFrom(&actions, 3) == 0 else { throw ChildProcessError(description: "posix_spawn_file_actions_addclosefrom_np failed") }
    }

    private typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    /// glibc's `posix_spawn_file_actions_addclosefrom_np`, which Swift's Glibc module does not show.
    private static let closeFrom: CloseFrom? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") else { return nil }
        return unsafeBitCast(symbol, to: CloseFrom.self)
    }()
}
