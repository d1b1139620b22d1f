module github.com/wovyr/wovyr

go 1.26.0
