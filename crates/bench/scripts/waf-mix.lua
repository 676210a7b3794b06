-- wrk script for the waf scenario's mix (crates/bench/src/waf.rs, kept in
-- step by a unit test there): 80 % GET with a query string, 20 % POST of a
-- urlencoded form, browser-like Accept headers.
--   OBJECT=/size/30720 wrk -t1 -c50 -d10s -s waf-mix.lua https://127.0.0.1:26086
-- OBJECT is the object path: /size/30720 (volume) or /size/1 (transaction).
local object = os.getenv("OBJECT") or "/size/30720"
local queries = {
  "?q=running+shoes&category=sport&page=2&sort=price_asc",
  "?product_id=48213&color=blue&size=42&ref=homepage",
  "?lang=en-GB&currency=GBP&utm_source=newsletter&utm_medium=email&utm_campaign=spring",
  "?search=garden+chairs&min_price=20&max_price=150&in_stock=1&view=grid",
  "?article=how-to-choose-a-tent&section=guides&comments=show"
}
local forms = {
  "first_name=Jane&last_name=Doe&email=jane.doe%40example.com&phone=%2B44+20+7946+0958&address_line1=221B+Baker+Street&address_line2=Flat+2&city=London&postcode=NW1+6XE&country=GB&shipping_method=standard&gift_wrap=0&newsletter=1&cart_id=7f3c9a12e4b04d5f&csrf_token=c2VjdXJlLXRva2VuLTg4MjE3MzQ5NTU",
  "name=Peter+Miller&email=peter.miller%40example.org&subject=Delivery+date&order_number=100234981&message=Hello%2C+I+ordered+two+pairs+of+running+shoes+last+week+and+would+like+to+know+when+they+will+arrive.+Could+you+send+me+the+tracking+number%3F+Thank+you+and+kind+regards%2C+Peter&consent=yes&csrf_token=9d1e77b2a0c34f6e8b5a",
  "username=maria_garcia85&email=maria.garcia%40example.net&password=Tr4vel-Spring-2024&password_confirm=Tr4vel-Spring-2024&birth_year=1985&language=es&timezone=Europe%2FMadrid&marketing_opt_in=false&terms=accepted&referral_code=SPRING24&csrf_token=5b8f0c2d6e1a4397",
  "product_id=48213&rating=4&title=Comfortable+and+light&review=I+have+worn+these+for+three+weeks+on+my+daily+runs.+They+are+light%2C+the+sole+grips+well+on+wet+roads+and+the+size+matches+the+chart.+Only+the+laces+are+a+bit+short.&display_name=Tom+K.&verified=1&csrf_token=0a9e3f71c2d84b56",
  "category=shoes&subcategory=running&brand%5B%5D=acme&brand%5B%5D=trailpeak&size=42&color=blue&price_min=40&price_max=120&sort=price_asc&page=2&per_page=24&in_stock=1&session_region=eu-west&ab_bucket=b&utm_source=newsletter&utm_medium=email&utm_campaign=spring"
}
local headers = {
  ["Host"] = "bench.switchyard.test",
  ["User-Agent"] = "switchyard-bench",
  ["Accept"] = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
  ["Accept-Language"] = "en-GB,en;q=0.9",
}
local post_headers = {}
for k, v in pairs(headers) do post_headers[k] = v end
post_headers["Content-Type"] = "application/x-www-form-urlencoded"

local i = 0
request = function()
  i = i + 1
  -- 1 in 5 is a POST (20 %), cycling through the forms and query strings.
  if i % 5 == 0 then
    return wrk.format("POST", object, post_headers, forms[math.floor(i / 5) % #forms + 1])
  end
  return wrk.format("GET", object .. queries[i % #queries + 1], headers)
end
