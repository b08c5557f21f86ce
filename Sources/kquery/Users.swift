import ArgumentParser
import KQuery
import KQueryServer
import KQueryWebServices

struct Users: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Add or list the local users of `kquery serve --data DIR` (user discovery's directory).",
        discussion: """
            `add NAME` saves a user (again: replaces it) in DIR/users.json, which a running server reads on each \
            users/* request: NAME is the userRecordName (what `kquery token --user` signs in), and users/discover \
            and users/lookup/* find the user by email address, phone number or name only with --discoverable. \
            `list` prints one JSON object per user. Exit status: 0 success, 2 a bad flag or value.
            """
    )

    enum Action: String, ExpressibleByArgument, CaseIterable {
        case add, list
    }

    @Option(help: ArgumentHelp("The server's data directory.", valueName: "DIR"))
    var data: String

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
        let data = data
        switch action {
        case .add:
            let user = try Serve.run { () throws(ServerError) in
                try DirectoryUser(
                    name: name ?? "", emailAddress: email, phoneNumber: phone, givenName: given, familyName: family, discoverable: discoverable)
            }
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
}
