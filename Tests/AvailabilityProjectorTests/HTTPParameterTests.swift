@testable import AvailabilityProjector
import Testing

/// The HTTP API reads its query as a form is encoded, and its path
/// parameter percent-decoded (Routes.swift).
@Suite("HTTP parameters")
struct HTTPParameterTests {
    @Test func aQueryIsDecodedAsAForm() {
        let pairs = ProjectorRoutes.formParameters("name=Big+Hall&equipment=video%20wall&na%6De=Z%C3%BCrich&plus=a%2Bb&flag&=x&")
        #expect(pairs.map(\.0) == ["name", "equipment", "name", "plus", "flag", ""])
        #expect(pairs.map(\.1) == ["Big Hall", "video wall", "Zürich", "a+b", "", "x"])
    }

    @Test func aMalformedEscapeIsKeptAsSent() {
        #expect(ProjectorRoutes.formParameters("name=100%")[0].1 == "100%")
        #expect(ProjectorRoutes.formParameters("name=%zz+x")[0].1 == "%zz+x")
        #expect(ProjectorRoutes.formParameters(nil).isEmpty)
        #expect(ProjectorRoutes.formParameters("").isEmpty)
    }

    @Test func aPathParameterIsPercentDecodedAndKeepsItsPlus() {
        #expect(ProjectorRoutes.pathParameter("Z%C3%BCrich") == "Zürich")
        #expect(ProjectorRoutes.pathParameter("Quiet%20Room") == "Quiet Room")
        #expect(ProjectorRoutes.pathParameter("C+D") == "C+D")
        #expect(ProjectorRoutes.pathParameter(nil) == "")
    }
}
