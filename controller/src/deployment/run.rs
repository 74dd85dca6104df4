pub async fn run() {}
