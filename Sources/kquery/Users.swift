import ArgumentParser
import KQuery
import KQueryContainer
import KQueryPostgres
import KQueryServer
import KQueryWebServices

struct Users: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Add or list the local users of `kquery serve --data DIR` or `--postgres URL` (user discovery's directory).",
        discussion: """
            `add NAME` saves a user (again: replaces it) in DIR/users.json, which a running server reads on each \
            users/* request: NAME is the userRecordName (what `kquery token --user` signs in), and users/discover \
            and users/lookup/* find the user by email address, phone number or name only with --discoverable. \
            With --postgres URL the directory is the one every `kquery serve --postgres URL` node reads, kept \
            in that database (a node's own DIR/users.json is read under it). \
            `list` prints one JSON object per user. Exit status: 0 success, 2 a bad flag or value.
            """
    )

    enum Action: String, ExpressibleByArgument, CaseIterable {
        case add, list
    }

    @Option(help: ArgumentHelp("The server's data directory.", valueName: "DIR"))
    var data: String?

    @Option(help: ArgumentHelp("The PostgreSQL database the servers share (postgresql://user[:password]@host[:port]/database).", valueName: "URL"), transform: PostgresLocation.argument)
    var postgres: PostgresLocation?

    @Argument(help: "add or list.")
    var action: Action

    @Argument(help: ArgumentHelp("The user record name to add (such as _alice).", valueName: "NAME"))
    var name: String?

    @Option(help: ArgumentHelp("The user's email address.", valueName: "E"))
    var email: String?

    @Option(help: ArgumentHelp("The user's phone number.", valueName: "P"))
    var phone: String?

    @Option(help: ArgumentHelp("The user's given name.", valueName: "G"))
    var given: String?

    @Option(help: ArgumentHelp("The user's family name.", valueName: "F"))
    var family: String?

    @Flag(help: "Let users/discover and users/lookup/* find the user, and show their names.")
    var discoverable = false

    func validate() throws {
        if (data == nil) == (postgres == nil) { throw ValidationError("give one of --data DIR and --postgres URL") }
        switch action {
        case .add:
            guard name != nil else { throw ValidationError("add needs the user's NAME") }
        case .list:
            guard name == nil, email == nil, phone == nil, given == nil, family == nil, !discoverable else {
                throw ValidationError("list takes no NAME and no user flags")
            }
        }
    }

    func run() throws {
        if let location = postgres {
            try runOnPostgres(location)
            return
        }
        let data = data ?? ""
        switch action {
        case .add:
            let user = try newUser()
            try Serve.run { () throws(ServerError) in
                _ = try ContainerDirectory(path: data)
                var directory = try UserDirectory.load(directory: data)
                directory.save(user)
                try directory.write(directory: data)
            }
        case .list:
            let directory = try Serve.run { () throws(ServerError) in try UserDirectory.load(directory: data) }
            Terminal.writeAll(directory.users.map { $0.json.serialized + "\n" }.joined(), to: 1)
        }
    }

    private func newUser() throws -> DirectoryUser {
        try Serve.run { () throws(ServerError) in
            try DirectoryUser(name: name ?? "", emailAddress: email, phoneNumber: phone, givenName: given, familyName: family, discoverable: discoverable)
        }
    }

    /// The directory the nodes on `location` share (`directory_users`).
    private func runOnPostgres(_ location: PostgresLocation) throws {
        let user = action == .add ? try newUser() : nil
        let containers = try ContainerFiles.run(exitCode: 2) { () throws(ContainerError) in try PostgresContainers(location: location, connections: 1) }
        defer { containers.close() }
        if let user {
            try ContainerFiles.run(exitCode: 2) { () throws(ContainerError) in try containers.saveDirectoryUser(name: user.name, entry: user.json.serialized) }
            return
        }
        let directory = try Serve.run { () throws(ServerError) in
            try PostgresServerStore(containers: containers).userDirectory()
        }
        Terminal.writeAll(directory.users.map { $0.json.serialized + "\n" }.joined(), to: 1)
    }
}
