import Synchronization
import CEditLine
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

/// Set by the SIGINT handler; read after `readline` returns.
private let interrupted = Atomic<Bool>(false)

/// What the completion callbacks (plain C function pointers, no context) read.
private struct CompletionState: Sendable {
    var vocabulary = CompletionVocabulary()
    var matches: [String] = []
}

private let completionState = Locked(CompletionState())

/// The terminal front end: libedit line editing, history, completion, prompt and colour, over `ShellSession`.
enum InteractiveShell {
    static let historyLimit: Int32 = 1000
    static let prompt = "kquery> "
    static let continuationPrompt = "...> "

    static func run(_ session: ShellSession) -> Int32 {
        let errorColor = Terminal.colorOnStandardError
        installInterruptHandler()
        cedit_set_completion(complete)
        let historyPath = ProcessInfo.processInfo.environment["HOME"].map { $0 + "/.kquery_history" }
        using_history()
        stifle_history(historyLimit)
        if let historyPath { _ = read_history(historyPath) }

        Terminal.writeAll("kquery shell: type .help for the commands, .quit or Ctrl-D to leave.\n", to: 1)
        var assembler = LineAssembler()
        while true {
            completionState.withLock { $0.vocabulary = session.vocabulary }
            interrupted.store(false, ordering: .relaxed)
            guard let raw = readline(assembler.isContinuing ? continuationPrompt : prompt) else {
                if interrupted.exchange(false, ordering: .relaxed) {
                    // Ctrl-C: drop the line (and any continued lines), prompt again.
                    assembler.cancel()
                    Terminal.writeAll("\n", to: 1)
                    continue
                }
                Terminal.writeAll("\n", to: 1)
                break
            }
            let line = String(cString: raw)
            free(raw)
            if interrupted.exchange(false, ordering: .relaxed) {
                assembler.cancel()
                continue
            }
            guard let command = assembler.add(line) else { continue }
            if !command.trimmingWhitespace.isEmpty {
                add_history(command)
                if let historyPath { _ = write_history(historyPath) }
            }
            let reply = session.execute(command)
            if !reply.output.isEmpty { Terminal.writeAll(reply.output, to: 1) }
            if !reply.error.isEmpty {
                Terminal.writeAll(errorColor && !reply.error.contains("\u{1B}[") ? colorize(reply.error) : reply.error, to: 2)
            }
            if reply.stop { break }
        }
        if let historyPath { _ = write_history(historyPath) }
        return 0
    }

    /// `error:` in bold red, like the predicate errors.
    private static func colorize(_ text: String) -> String {
        guard text.hasPrefix("error:") else { return text }
        return "\u{1B}[1m\u{1B}[31merror:\u{1B}[0m" + text.dropFirst("error:".count)
    }

    /// SIGINT sets a flag instead of killing the process; no SA_RESTART, so `readline` returns.
    private static func installInterruptHandler() {
        var action = sigaction()
        #if canImport(Glibc)
        action.__sigaction_handler.sa_handler = { _ in interrupted.store(true, ordering: .relaxed) }
        #else
        action.__sigaction_u.__sa_handler = { _ in interrupted.store(true, ordering: .relaxed) }
        #endif
        sigemptyset(&action.sa_mask)
        action.sa_flags = 0
        sigaction(SIGINT, &action, nil)
        // A parent may have left SIGINT blocked (the mask is inherited): Ctrl-C must reach us.
        var unblock = sigset_t()
        sigemptyset(&unblock)
        sigaddset(&unblock, SIGINT)
        pthread_sigmask(SIG_UNBLOCK, &unblock, nil)
    }
}

/// libedit's attempted-completion hook: candidates from the session's vocabulary.
private func complete(_ text: UnsafePointer<CChar>?, _ start: Int32, _ end: Int32) -> UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? {
    guard let text else { return nil }
    let word = String(cString: text)
    let before = LineBuffer.prefix(length: Int(start))
    let matches = completionState.withLock { state -> [String]? in
        let found = state.vocabulary.completions(for: word, before: before)
        state.matches = found ?? []
        return found
    }
    // No list: libedit completes file names (for .load); an empty list: nothing to offer.
    LineBuffer.setAttemptedCompletionOver(matches != nil)
    guard let matches, !matches.isEmpty else { return nil }
    return rl_completion_matches(text, generate)
}

/// libedit's generator: the `state`-th match, malloc'd, or nil when done.
private func generate(_ text: UnsafePointer<CChar>?, _ state: Int32) -> UnsafeMutablePointer<CChar>? {
    completionState.withLock { completion in
        let index = Int(state)
        guard index >= 0, index < completion.matches.count else { return nil }
        return strdup(completion.matches[index])
    }
}

/// The text of libedit's line buffer before the word being completed.
enum LineBuffer {
    static func prefix(length: Int) -> String {
        guard length > 0, let buffer = lineBufferPointer() else { return "" }
        let bytes = UnsafeRawPointer(buffer).assumingMemoryBound(to: UInt8.self)
        var count = 0
        while count < length, bytes[count] != 0 { count += 1 }
        return String(decoding: UnsafeBufferPointer(start: bytes, count: count), as: UTF8.self)
    }

    /// `rl_attempted_completion_over`: when set, an empty answer does not fall back to file names.
    static func setAttemptedCompletionOver(_ over: Bool) {
        guard let symbol = symbol("rl_attempted_completion_over") else { return }
        symbol.assumingMemoryBound(to: Int32.self).pointee = over ? 1 : 0
    }

    /// `rl_line_buffer`, read through its address: Swift 6 refuses to touch the mutable C global.
    private static func lineBufferPointer() -> UnsafeMutablePointer<CChar>? {
        symbol("rl_line_buffer")?.assumingMemoryBound(to: UnsafeMutablePointer<CChar>?.self).pointee
    }

    /// The address of one of libedit's globals.
    private static func symbol(_ name: String) -> UnsafeMutableRawPointer? {
        guard let handle = dlopen(nil, RTLD_NOW) else { return nil }
        return dlsym(handle, name)
    }
}
