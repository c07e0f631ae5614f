"""Images on a GPU node: this host as the doctor sees it (`probe`) and the payload's smoke test and benchmark run in
a container (`inimage`)."""
