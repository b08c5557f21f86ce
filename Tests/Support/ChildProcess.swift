#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// A child process started with posix_spawn, its standard streams on /dev/null, for tests that
/// start many and kill them: Foundation's `Process.run()` crashed (SIGSEGV in a memcpy inside it)
/// when called forty times in a row while other suites started processes of their own.
public struct ChildProcess: Sendable {
    public let pid: pid_t

    /// Starts `executable` with `arguments` (the environment is `Process.kqueryEnvironment`).
    public init(_ executable: String, _ arguments: [String]) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for descriptor: Int32 in [0, 1, 2] {
            posix_spawn_file_actions_addopen(&actions, descriptor, "/dev/null", descriptor == 0 ? O_RDONLY : O_WRONLY, 0)
        }
        try SpawnedProcess.closeInheritedDescriptors(&actions)
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        let environment = Process.kqueryEnvironment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for pointer in environment { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, executable, &actions, nil, argv, environment)
        guard spawned == 0 else { throw ChildProcessError(description: "\(executable) could not start (\(spawned))") }
        self.pid = pid
    }

    /// Sends `signal` (the process may have exited already).
    public func kill(_ signal: Int32) { _ = Glibc.kill(pid, signal) }

    /// Waits for the process to end: its exit status, or nil when a signal ended it.
    public func waitForExit() -> Int32? {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        // WIFEXITED: the low 7 bits (the signal) are zero; WEXITSTATUS: the next 8.
        return status & 0x7F == 0 ? (status >> 8) & 0xFF : nil
    }
}

public struct ChildProcessError: Error, CustomStringConvertible {
    public let description: String
}

extension Process {
    /// The environment a `kquery` the tests start runs with: the test process's, and
    /// `KQUERY_EXIT_WITH_PARENT=1`, so it ends when the test process does, even by a crash.
    public static var kqueryEnvironment: [String: String] {
        ProcessInfo.processInfo.environment.merging(["KQUERY_EXIT_WITH_PARENT": "1"]) { $1 }
    }
}
