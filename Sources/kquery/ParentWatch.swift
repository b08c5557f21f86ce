#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// With `KQUERY_EXIT_WITH_PARENT=1` in its environment (the tests set it for every kquery they
/// start), kquery ends within a second of the process that started it ending: a test process
/// that crashed left its servers running, each holding a port and its PostgreSQL connections.
enum ParentWatch {
    static func startIfAsked() {
        guard ProcessInfo.processInfo.environment["KQUERY_EXIT_WITH_PARENT"] == "1" else { return }
        let parent = getppid()
        // (An orphan's parent becomes init or a subreaper: a different process.)
        let watcher = Thread {
            while getppid() == parent { sleep(1) }
            _exit(3)
        }
        watcher.name = "kquery parent watch"
        watcher.start()
    }
}
