import ArgumentParser
import KQuery

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `kquery shell` (the default subcommand): an interactive shell on a terminal, or a script runner
/// for piped input and `-f FILE`.
struct Shell: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "An interactive shell over loaded records or a database file (the default when no subcommand is given).",
        discussion: """
            Type .help for the commands. Queries are `TYPE [WHERE PREDICATE] [SORT BY FIELD [ASC|DESC], ...] [LIMIT N]`.
            With piped input or -f, commands run without a prompt and the first error stops with status 1 \
            (with --keep-going every line runs, and the status is 1 if any failed).
            """
    )

    @Option(name: [.customShort("f"), .customLong("file")], help: ArgumentHelp("Run the commands in FILE, then exit.", valueName: "FILE"))
    var file: String?

    @Flag(name: .customLong("keep-going"), help: "In a script, keep running after an error (exit 1 at the end).")
    var keepGoing = false

    @Option(help: ArgumentHelp("Open this database file first (as .open FILE).", valueName: "FILE"))
    var db: String?

    func run() throws {
        let session = ShellSession(color: false)
        if let db {
            let reply = session.open(db)
            if reply.failed {
                Terminal.writeAll(reply.error, to: 2)
                throw ExitCode(2)
            }
        }
        if let file {
            guard let data = FileManager.default.contents(atPath: file) else {
                Terminal.writeError("error: cannot read script '\(file)'")
                throw ExitCode(2)
            }
            let text = String(decoding: data, as: UTF8.self)
            var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            if text.hasSuffix("\n") { lines.removeLast() }
            var iterator = lines.makeIterator()
            throw ExitCode(ShellRunner.runScript(session, next: { iterator.next() }, keepGoing: keepGoing))
        }
        if isatty(0) == 1 {
            session.color = Terminal.colorOnStandardOutput
            throw ExitCode(InteractiveShell.run(session))
        }
        throw ExitCode(ShellRunner.runScript(session, next: { readLine(strippingNewline: true) }, keepGoing: keepGoing))
    }
}

/// Non-interactive: no prompt, no colour; stops at the first error unless `keepGoing`.
enum ShellRunner {
    static func runScript(_ session: ShellSession, next: () -> String?, keepGoing: Bool) -> Int32 {
        var assembler = LineAssembler()
        var failed = false
        while true {
            let command: String
            if let line = next() {
                guard let complete = assembler.add(line) else { continue }
                command = complete
            } else {
                guard let rest = assembler.flush() else { break }
                command = rest
            }
            let reply = session.execute(command)
            write(reply)
            if reply.failed {
                failed = true
                if !keepGoing { return 1 }
            }
            if reply.stop { break }
        }
        return failed ? 1 : 0
    }

    static func write(_ reply: ShellReply) {
        if !reply.output.isEmpty { Terminal.writeAll(reply.output, to: 1) }
        if !reply.error.isEmpty { Terminal.writeAll(reply.error, to: 2) }
    }
}
