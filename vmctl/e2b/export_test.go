package e2b

// AccessToken is accessToken, for the tests.
var AccessToken = accessToken
